"""Importing a rousseau-agent (Go) sessions.db: sessions with tool calls, WhatsApp chats, cron
jobs; a second run imports nothing new; a wrong file is one clear error."""

from __future__ import annotations

import argparse
import functools
import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
import structlog

from rousseau.agent import ContentKind, Role, StoreError
from rousseau.cli.import_go import go_schedule, go_target
from rousseau.cli.import_go import import_file as import_into
from rousseau.cli.import_go import import_go as import_go_command
from rousseau.cron import CronJobs, target_of
from rousseau.state import Store
from rousseau.state.import_go import GoImport, session_id_for
from rousseau.state.sqlite_cron import SqliteCronJobs

FIXTURE = Path(__file__).parent.parent / "fixtures" / "go_sessions.sql"
WHATSAPP = "0b6f3a52-3d5e-4a8e-9a3c-6d1f0c2b7e41"
TERMINAL = "5c1d9e07-8f2a-4b6c-b1d4-2e7a9f3c0d58"
TELEGRAM = "9a4e2b7c-1f3d-4c8e-a5b6-7d0e9f1a2b3c"


def build_go_db(path: Path) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.executescript(FIXTURE.read_text(encoding="utf-8"))
    return path


def import_file(path: Path, store: Store, *, timezone: str = "local") -> GoImport:
    """The import into a SQLite store and its cron jobs."""
    return anyio.run(
        functools.partial(import_into, path, store, SqliteCronJobs(store), timezone=timezone)
    )


def sql(store: Store, query: str, *args: object) -> list[tuple[object, ...]]:
    return store.call_sync(lambda db: db.execute(query, args).fetchall())


@pytest.fixture
def go_db(tmp_path: Path) -> Path:
    return build_go_db(tmp_path / "rousseau-agent.db")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "rousseau.db") as s:
        yield s


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_sessions_come_with_their_messages_and_tool_calls(go_db: Path, store: Store) -> None:
    result = import_file(go_db, store, timezone="UTC")

    assert (result.sessions, result.messages, result.tool_calls) == (3, 12, 2)
    assert result.empty_sessions == 1
    session = store.load_sync(session_id_for(WHATSAPP))
    assert session is not None
    roles = [m.role for m in session.messages]
    assert roles == [Role.USER, Role.ASSISTANT] * 4
    assert session.messages[0].text == "What's in notes.txt?"
    assert session.messages[1].text == "Let me look."
    [read] = session.messages[1].tool_uses
    assert (read.id, read.name, read.input) == ("toolu_01", "read", {"path": "notes.txt"})
    [output] = session.messages[2].tool_results
    assert (output.tool_use_id, output.content, output.is_error) == (
        "toolu_01",
        "buy milk\ncall Anna",
        False,
    )
    [bash] = session.messages[5].tool_uses
    assert bash.input == {"command": "cd app && make test 2>&1"}
    [failed] = session.messages[6].tool_results
    assert failed.is_error and failed.content == "make: *** [test] Error 2"

    info = store.info_sync(session_id_for(WHATSAPP))
    assert info is not None
    assert info.title == "chat: 4915112345678@s.whatsapp.net"
    assert info.message_count == 8
    assert info.created_at == pytest.approx(stamp("2025-03-01T08:59:59.900"))
    assert info.updated_at == pytest.approx(stamp("2025-03-01T09:05:11"))
    times = sql(
        store,
        "SELECT created_at FROM messages WHERE session_id = ? ORDER BY id",
        session_id_for(WHATSAPP),
    )
    assert times[0][0] == pytest.approx(stamp("2025-03-01T09:00:00.123456"))
    assert [h.session_id for h in store.search_sync("milk")] == [session_id_for(WHATSAPP)]


def test_what_rousseau_has_no_place_for_is_reported(go_db: Path, store: Store) -> None:
    result = import_file(go_db, store, timezone="UTC")

    session = store.load_sync(session_id_for(TERMINAL))
    assert session is not None
    assert [m.role for m in session.messages] == [Role.USER, Role.ASSISTANT]
    question = session.messages[0]
    assert [c.kind for c in question.content] == [ContentKind.TEXT, ContentKind.TEXT]
    assert question.content[0].text == "What is on this picture?"
    assert "image/png" in question.content[1].text
    assert session.messages[1].text == "Une facture d'électricité."
    [note] = [s for s in result.skipped if TERMINAL in s]
    assert "1 image(s)" in note and "1 system message(s)" in note


def test_a_whatsapp_chat_continues_its_imported_session(go_db: Path, store: Store) -> None:
    result = import_file(go_db, store, timezone="UTC")

    whatsapp, telegram = session_id_for(WHATSAPP), session_id_for(TELEGRAM)
    assert result.chats == 1
    assert sql(store, "SELECT session_key, session_id FROM chat_sessions") == [
        ("whatsapp:4915112345678@s.whatsapp.net", whatsapp)
    ]
    scopes = dict(
        (sid, (owner, chat))
        for sid, owner, chat in sql(store, "SELECT id, owner, chat FROM sessions")
    )
    assert scopes[whatsapp] == (
        "whatsapp:4915112345678",
        "whatsapp:4915112345678@s.whatsapp.net",
    )
    # Its transport cannot be told: kept out of everyone's recall except with scope all.
    assert scopes[telegram] == ("rousseau-agent:123456789", "rousseau-agent:123456789")
    assert scopes[session_id_for(TERMINAL)] == (None, None)


def test_an_existing_chat_binding_is_left_alone(go_db: Path, store: Store) -> None:
    key = "whatsapp:4915112345678@s.whatsapp.net"
    store.call_sync(
        lambda db: db.execute(
            "INSERT INTO chat_sessions (session_key, session_id, updated_at) VALUES (?, ?, 0)",
            (key, "abc123"),
        ),
        write=True,
    )
    result = import_file(go_db, store, timezone="UTC")
    assert result.chats == 0 and result.sessions == 3
    assert sql(store, "SELECT session_id FROM chat_sessions WHERE session_key = ?", key) == [
        ("abc123",)
    ]


def test_cron_jobs_keep_their_schedule_and_get_whatsapp_targets(go_db: Path, store: Store) -> None:
    result = import_file(go_db, store, timezone="UTC")

    jobs = {job.name: job for job in anyio.run(SqliteCronJobs(store).all)}
    assert result.cron_jobs == 3 and set(jobs) == {"morning-brief", "family-digest", "water-plants"}
    brief = jobs["morning-brief"]
    assert (brief.schedule, brief.deliver_to, brief.enabled, brief.timezone) == (
        "0 8 * * 1-5",
        "whatsapp:4915112345678@s.whatsapp.net",
        True,
        "UTC",
    )
    assert brief.prompt == "Summarise my calendar for today."
    assert target_of(brief) == ("whatsapp", "4915112345678@s.whatsapp.net")
    digest = jobs["family-digest"]
    assert digest.schedule == "CRON_TZ=Europe/Berlin 30 18 * * 5"
    assert digest.deliver_to == "whatsapp:120363025246125486@g.us"
    assert not digest.enabled
    plants = jobs["water-plants"]
    assert (plants.schedule, plants.deliver_to) == (
        "@every 1h30m",
        "whatsapp:4915112345678@s.whatsapp.net",
    )
    assert plants.next_run_at is not None
    [ping] = [s for s in result.skipped if "'ping'" in s]
    assert "'42'" in ping and "--deliver-to TRANSPORT:42" in ping


def test_a_second_run_imports_nothing_new(go_db: Path, store: Store) -> None:
    first = import_file(go_db, store, timezone="UTC")
    counts = [
        sql(store, f"SELECT count(*) FROM {table}")
        for table in ("sessions", "messages", "cron_jobs", "chat_sessions")
    ]

    second = import_file(go_db, store, timezone="UTC")

    assert (second.sessions, second.messages, second.tool_calls) == (0, 0, 0)
    assert (second.cron_jobs, second.chats) == (0, 0)
    assert (second.sessions_present, second.cron_present) == (3, 3)
    assert second.sessions_present == first.sessions
    assert [
        sql(store, f"SELECT count(*) FROM {table}")
        for table in ("sessions", "messages", "cron_jobs", "chat_sessions")
    ] == counts
    assert [s for s in second.skipped if s.startswith("session ")] == []


def test_a_job_of_the_same_name_is_not_overwritten(go_db: Path, store: Store) -> None:
    jobs = CronJobs(SqliteCronJobs(store))
    anyio.run(
        functools.partial(
            jobs.add, "morning-brief", "@daily", "Something else.", "telegram:42", timezone="UTC"
        )
    )
    result = import_file(go_db, store, timezone="UTC")
    assert result.cron_jobs == 2
    assert any("'morning-brief'" in s and "another job" in s for s in result.skipped)
    assert anyio.run(jobs.get, "morning-brief").prompt == "Something else."


def test_the_source_is_only_read(go_db: Path, store: Store) -> None:
    before = hashlib.sha256(go_db.read_bytes()).hexdigest()
    import_file(go_db, store, timezone="UTC")
    assert hashlib.sha256(go_db.read_bytes()).hexdigest() == before


def test_an_unreadable_payload_skips_that_session_only(go_db: Path, store: Store) -> None:
    with closing(sqlite3.connect(go_db)) as db, db:
        db.execute(
            "INSERT INTO sessions (id, title, payload, created_at, updated_at)"
            " VALUES ('broken', 't', '{not json', '2025-03-05T00:00:00.000Z',"
            " '2025-03-05T00:00:00.000Z')"
        )
    result = import_file(go_db, store, timezone="UTC")
    assert result.sessions == 3
    assert "session broken: its payload is not a readable session" in result.skipped


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("missing", "no rousseau-agent database at"),
        ("garbage", "is not a SQLite database"),
        ("empty-sqlite", "not a rousseau-agent database \\(no rousseau-agent sessions table"),
        ("rousseau-store", "not a rousseau-agent database \\(a rousseau store"),
    ],
)
def test_a_wrong_file_is_one_clear_error(
    tmp_path: Path, store: Store, kind: str, says: str
) -> None:
    path = tmp_path / "other.db"
    if kind == "garbage":
        path.write_bytes(b"\x00garbage, not sqlite" * 64)
    elif kind == "empty-sqlite":
        sqlite3.connect(path).close()
    elif kind == "rousseau-store":
        Store(path).close()
    with pytest.raises(StoreError, match=says):
        import_file(path, store)


def test_rousseaus_own_store_is_refused_as_a_source(tmp_path: Path) -> None:
    path = tmp_path / "rousseau.db"
    with Store(path) as store, pytest.raises(StoreError, match="rousseau's own store"):
        import_file(path, store)


@pytest.mark.parametrize(
    ("recipient", "target"),
    [
        ("4915112345678@s.whatsapp.net", "whatsapp:4915112345678@s.whatsapp.net"),
        ("4915112345678:7@s.whatsapp.net", "whatsapp:4915112345678@s.whatsapp.net"),
        ("120363025246125486@g.us", "whatsapp:120363025246125486@g.us"),
        ("!room:example.org", "matrix:!room:example.org"),
        ("iMessage;-;+15551234567", "imessage:iMessage;-;+15551234567"),
        ("group:abc=", "signal:group:abc="),
        ("alice@example.org", "email:alice@example.org"),
        ("C0123ABC", "slack:C0123ABC"),
        ("telegram:42", "telegram:42"),
        ("42", None),
        ("+15551234567", None),
        ("", None),
    ],
)
def test_go_recipients_become_rousseau_targets(recipient: str, target: str | None) -> None:
    assert go_target(recipient)[0] == target


@pytest.mark.parametrize(
    ("expr", "schedule"),
    [
        ("0 8 * * 1-5", "0 8 * * 1-5"),
        ("TZ=Europe/Paris 0 9 * * *", "CRON_TZ=Europe/Paris 0 9 * * *"),
        ("CRON_TZ=UTC @every 2h0m0s", "CRON_TZ=UTC @every 2h"),
        ("@every 1.5h", "@every 1h30m"),
        ("@every 500ms", "@every 1s"),
        ("@daily", "@daily"),
    ],
)
def test_go_schedules_become_rousseau_schedules(expr: str, schedule: str) -> None:
    assert go_schedule(expr) == schedule


@pytest.fixture
def cli_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command sets up logging for the whole process; put it back for the next test."""
    import rousseau.cli.common

    monkeypatch.setattr(rousseau.cli.common, "redactor", None)
    yield
    structlog.reset_defaults()


def cli_args(tmp_path: Path, go_db: Path, state: Path) -> argparse.Namespace:
    config = tmp_path / "config.yaml"
    config.write_text(f"state: {{path: {state}}}\ncron: {{timezone: UTC}}\n")
    return argparse.Namespace(path=str(go_db), config=str(config), debug=False)


@pytest.mark.usefixtures("cli_logging")
def test_the_command_prints_what_it_imported(
    tmp_path: Path, go_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = cli_args(tmp_path, go_db, tmp_path / "state.db")

    assert import_go_command(args) == 0
    first = capsys.readouterr().out
    assert f"imported from {go_db}:" in first
    assert "3 sessions (12 messages, 2 tool calls)" in first
    assert "1 WhatsApp chat will continue where it left off" in first
    assert "3 cron jobs" in first and "'ping'" in first
    assert "left out 1 empty session" in first

    assert import_go_command(args) == 0
    second = capsys.readouterr().out
    assert f"nothing new to import from {go_db}" in second
    assert "already here: 3 sessions, 3 cron jobs" in second


@pytest.mark.usefixtures("cli_logging")
def test_the_command_refuses_the_database_rousseau_itself_uses(tmp_path: Path, go_db: Path) -> None:
    # rousseau-agent's default state.path is rousseau's too: the file must be moved first.
    with pytest.raises(StoreError, match="move it aside"):
        import_go_command(cli_args(tmp_path, go_db, go_db))
    with closing(sqlite3.connect(go_db)) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert "schema_migrations" not in tables


def test_an_empty_result_reads_as_nothing_imported() -> None:
    from rousseau.cli.import_go import report

    assert report(GoImport(), "x.db") == ["nothing new to import from x.db"]
