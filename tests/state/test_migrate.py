"""`rousseau migrate-state`: a SQLite store moved into PostgreSQL (a real server) whole, then
counted; refused into a database that is not empty, or while messages wait for answers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Attachment, Content, Message, Role, Usage
from rousseau.agent.protocols import ToolCallRecord
from rousseau.cron import CronJobs
from rousseau.messages import Inbound, Outbound
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState, TransportState
from rousseau.state.sqlite_cron import SqliteCronJobs
from rousseau.state.sqlite_profiles import SqliteProfiles
from tests.helpers import ROUSSEAU
from tests.postgres.server import Postgres

CHART = Attachment(sha256="ab" * 32, media_type="image/png", size=3, name="chart.png")


async def fill(store: Store) -> None:
    state = DaemonState(store)
    await store.create_session("s1")
    await state.bind_session("telegram:42", "s1", owner="telegram:42", chat="telegram:42")
    await store.append_message("s1", Message.user("the capybara census is on Friday"))
    await store.append_message(
        "s1",
        Message(
            role=Role.ASSISTANT, content=[Content.of_text("here"), Content.of_attachment(CHART)]
        ),
        Usage(input_tokens=12, output_tokens=5),
    )
    await store.set_external_session("s1", "claudecli", "ext-9")
    await store.record_tool_call(
        ToolCallRecord(
            session_id="s1",
            tool="bash",
            input_digest="d",
            decision="allow",
            decided_by="policy",
            reason="",
            started_at=1.0,
            duration=0.1,
            outcome="ok",
        )
    )
    await store.flush()
    grant = await state.pairing_code("telegram", "7", "7", "CODE77", ttl=600)
    assert grant is not None
    await state.approve("CODE77")
    await TransportState(store, "matrix").set("sync", "s123")
    jobs = SqliteCronJobs(store)
    job = await CronJobs(jobs).add("daily", "0 9 * * *", "news", "telegram:42", timezone="UTC")
    run = await jobs.claim(job, 1000.0)
    assert run is not None
    await jobs.finish(run, job, "ok", session_id="s1")
    await state.finish(None, [Outbound(transport="telegram", chat_id="42", text="waiting")])
    profiles = SqliteProfiles(store)
    done = await profiles.add_entry("default", "telegram:42", "counts capybaras", max_chars=99)
    assert done == "done"


def config_for(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": {"path": str(tmp_path / "state.db")}}))
    return config


def migrate(config: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROUSSEAU, "--config", str(config), "migrate-state", "--to", url],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(config.parent),
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a checkout's code
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


async def check(url: str) -> None:
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_cron import PostgresCronJobs
    from rousseau.state.postgres_daemon import PostgresDaemonState
    from rousseau.state.postgres_kv import PostgresTransportState
    from rousseau.state.postgres_profiles import PostgresProfiles
    from rousseau.tools.memory import ProfileSection

    store = await PostgresStore.open(url)
    state = PostgresDaemonState(store)
    await state.beat()
    session = await store.load("s1")
    assert session is not None
    assert [m.text for m in session.messages] == ["the capybara census is on Friday", "here"]
    assert session.messages[1].attachments == [CHART]  # the reference, by content hash
    [info] = await store.list_sessions()
    assert (info.message_count, info.usage.input_tokens) == (2, 12)
    hits = await store.recall("capybara", 5)
    assert [h.session_id for h in hits] == ["s1"]  # the recall index was built
    assert await store.get_external_session("s1", "claudecli") == "ext-9"
    assert [r.tool for r in await store.tool_calls()] == ["bash"]
    assert await state.session_for("telegram:42") == "s1"
    assert await state.is_allowed("telegram", "7")
    assert await PostgresTransportState(store, "matrix").get("sync") == "s123"
    jobs = PostgresCronJobs(store)
    job = await CronJobs(jobs).get("daily")
    [run] = await jobs.runs(job.id)
    assert (run.status, run.session_id) == ("ok", "s1")
    assert await jobs.claim(job, 1000.0) is None  # the run still claims its time
    assert [r.message.text for r in await state.due("telegram")] == ["waiting"]
    await store.append_message("s1", Message.user("and after the move"))  # ids go on
    assert len((await store.load("s1") or session).messages) == 3
    profiles = PostgresProfiles(store)
    [entry] = await profiles.entries()
    assert (entry.agent, entry.person, entry.text) == ("default", "telegram:42", "counts capybaras")
    shown = await ProfileSection(profiles, agent="default").of("telegram:42")
    assert shown.endswith("] counts capybaras")  # the profile reaches the prompt as before
    assert await profiles.add_entry("default", "telegram:42", "and more", max_chars=99) == "done"
    assert [e.id for e in await profiles.entries()] == [entry.id, entry.id + 1]  # ids go on
    await store.aclose()


def test_a_sqlite_store_moves_into_postgresql_whole(tmp_path: Path, postgres: Postgres) -> None:
    store = Store(tmp_path / "state.db")
    anyio.run(fill, store)
    store.close()
    config = config_for(tmp_path)
    url = postgres.new_database()
    done = migrate(config, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "messages                  2           2" in done.stdout, done.stdout
    assert f"{'profile_entries':<18}{1:>9}{1:>12}\n" in done.stdout, done.stdout
    assert "DIFFERENT" not in done.stdout and url not in done.stdout + done.stderr
    anyio.run(check, url)
    again = migrate(config, url)  # into a store that is not empty: refused, nothing touched
    assert again.returncode != 0 and "not empty" in again.stderr


def test_messages_still_to_answer_must_be_answered_first(
    tmp_path: Path, postgres: Postgres
) -> None:
    store = Store(tmp_path / "state.db")
    inbound = Inbound(transport="telegram", chat_id="42", sender_id="42", message_id="1", text="hi")
    anyio.run(DaemonState(store).accept, inbound)
    store.close()
    done = migrate(config_for(tmp_path), postgres.new_database())
    assert done.returncode != 0 and "still to be answered" in done.stderr, done.stderr


@pytest.mark.parametrize("url", ["mysql://x/y", "sessions.db"])
def test_the_target_must_be_postgresql(tmp_path: Path, url: str) -> None:
    Store(tmp_path / "state.db").close()
    done = migrate(config_for(tmp_path), url)
    assert done.returncode == 2 and "--to: a PostgreSQL URL" in done.stderr
