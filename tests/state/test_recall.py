"""FTS5 recall: kept in sync by triggers, safe against any text, scoped to its owner."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rousseau.agent import Agent, Message, Options, Session
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from rousseau.state.recall import Scope, SQLiteRecall, fts_query, search_op

pytestmark = pytest.mark.anyio


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(":memory:") as made:
        yield made


async def chat(store: Store, session_id: str, owner: str | None, *texts: str) -> None:
    await store.create_session(session_id)
    if owner is not None:
        await DaemonState(store).bind_session(owner, session_id, owner=owner, chat=owner)
    for text in texts:
        await store.append_message(session_id, Message.user(text))


async def test_recall_finds_another_session_and_never_the_current_one(store: Store) -> None:
    await chat(store, "old", "telegram:42", "My locker code is 4711, remember it")
    await chat(store, "noise", "telegram:42", "The weather was fine yesterday")
    await chat(store, "now", "telegram:42", "what was my locker code again?")
    current = await store.load("now")
    assert current is not None
    appendix = await SQLiteRecall(store).appendix(current)
    assert "4711" in appendix and "weather" not in appendix
    assert "what was my locker code again" not in appendix  # the current session is excluded


async def test_scope_sender_never_shows_another_persons_sessions(store: Store) -> None:
    await chat(store, "alice", "telegram:1", "Alice's salary is 90000 euros")
    await chat(store, "bob", "telegram:2", "what is the salary?")
    await chat(store, "group", "telegram:-100", "salary talk in the group")
    bob = await store.load("bob")
    assert bob is not None
    assert await SQLiteRecall(store, scope="sender").appendix(bob) == ""
    everything = await SQLiteRecall(store, scope="all").appendix(bob)
    assert "90000" in everything and "group" in everything


async def test_local_sessions_recall_only_local_sessions(store: Store) -> None:
    await chat(store, "mine", None, "the deploy key lives in vault")
    await chat(store, "theirs", "slack:U1", "the deploy key is rotated weekly")
    await chat(store, "here", None, "where is the deploy key?")
    here = await store.load("here")
    assert here is not None
    hits = await SQLiteRecall(store).recall(here, "where is the deploy key?")
    assert [h.session_id for h in hits] == ["mine"]


@pytest.mark.parametrize(
    "hostile",
    [
        '"',
        '""',
        "AND",
        "OR NOT",
        "*",
        "NEAR(a b)",
        "text:foo",
        "a\"b'c",
        "^start",
        "-",
        "(((",
        "日本語のテキスト",
        "emoji 🎉 party",
        "\x00",
        "a" * 5000,
        "_ _ _",
        "",
    ],
)
async def test_hostile_text_never_raises(store: Store, hostile: str) -> None:
    await chat(store, "s", None, "日本語のテキスト and an emoji party 🎉", "NEAR the end")
    found = await store.call(search_op(hostile, 5))
    assert isinstance(found, list)
    assert isinstance(await store.search(hostile), list)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_makes_a_valid_query(text: str) -> None:
    query = fts_query(text)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    if query is not None:
        db.execute("SELECT * FROM t WHERE t MATCH ?", (query,)).fetchall()
    db.close()


async def test_index_follows_inserts_and_deletes(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        await chat(store, "gone", None, "a zebra crossing")
        assert [h.session_id for h in await store.search("zebra")] == ["gone"]
        await store.delete_session("gone")
        assert await store.search("zebra") == []
        # and the index agrees with its content table
        ok = await store.call(
            lambda db: db.execute(
                "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)"
            )
        )
        assert ok is not None


def test_migration_backfills_existing_messages(tmp_path: Path) -> None:
    """A store from before the index: its messages are searchable after the upgrade."""
    from rousseau.state import migrations

    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    saved = migrations.MIGRATIONS
    try:
        migrations.MIGRATIONS = saved[:5]
        migrations.migrate(db)
    finally:
        migrations.MIGRATIONS = saved
    db.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('s', 0, 0)")
    db.execute(
        "INSERT INTO messages (session_id, role, content, text, created_at)"
        " VALUES ('s', 'user', '[]', 'an aardvark appeared', 0)"
    )
    db.close()
    with Store(path) as store:
        [hit] = store.search_sync("aardvark")
    assert hit.session_id == "s" and "aardvark" in hit.text


async def test_session_search_matches_prefixes(store: Store) -> None:
    await chat(store, "s", None, "Deployment finished at noon")
    assert [h.session_id for h in await store.search("deploy")] == ["s"]
    assert await store.search("deploy tomorrow") == []  # every word must match


async def test_compressed_history_stays_in_the_store_and_in_recall(tmp_path: Path) -> None:
    """Compression shortens what the model sees; the store and recall keep everything."""
    from rousseau.agent import LLMCompressor

    seen: list[int] = []

    def answer(request) -> object:  # type: ignore[no-untyped-def]
        if request.system and "summar" in request.system.lower():
            return text_reply("Summary: we talked about many numbered things.")
        seen.append(len(request.messages))
        return text_reply("ok")

    with Store(tmp_path / "s.db") as store:
        provider = FunctionProvider(answer)
        agent = Agent(
            provider,
            options=Options(
                history=store,
                compressor=LLMCompressor(provider, trigger_messages=10, keep_recent=4),
                recall=SQLiteRecall(store),
            ),
        )
        session = Session(id="long")
        await store.create_session("long")
        for i in range(12):
            await agent.reply(session, f"fact number {i}: the capybara count is {i * 7}")
        assert max(seen) <= 11 and seen[-1] < 11  # the working context was cut
        info = store.info_sync("long")
        assert info is not None and info.message_count == 24  # nothing deleted
        await chat(store, "later", None, "what was the capybara count?")
        later = await store.load("later")
        assert later is not None
        hits = await SQLiteRecall(store, top_k=30).recall(later, "capybara count")
        assert {h.session_id for h in hits} == {"long"} and len(hits) == 12


def test_build_agent_wires_recall_skills_and_compression(tmp_path: Path) -> None:
    from rousseau.agent import LLMCompressor
    from rousseau.assembly import build_agent
    from rousseau.config import load_config
    from rousseau.skills import Skills

    env = {
        "HOME": str(tmp_path),
        "ROUSSEAU_AGENT_COMPRESSION_ENABLED": "true",
        "ROUSSEAU_AGENT_RECALL_SCOPE": "all",
        "ROUSSEAU_AGENT_SKILLS_DIR": str(tmp_path / "skills"),
    }
    with Store(":memory:") as store:
        agent = build_agent(
            load_config(None, env), FunctionProvider(lambda r: text_reply("")), store
        )
    assert isinstance(agent.options.compressor, LLMCompressor)
    assert isinstance(agent.options.recall, SQLiteRecall) and agent.options.recall.scope == "all"
    assert isinstance(agent.options.skills, Skills)
    assert agent.options.skills.folder == tmp_path / "skills"


async def test_a_long_message_asks_about_a_bounded_number_of_words(store: Store) -> None:
    from rousseau.state import recall

    await chat(store, "old", None, "the pterodactyl is extinct")
    asked: list[str] = []

    def trace(statement: str) -> None:
        if "LIMIT" in statement and "count(*)" in statement:
            asked.append(statement)

    await store.call(lambda db: db.set_trace_callback(trace))
    long = " ".join(f"word{i}" for i in range(500)) + " pterodactylidae pterodactyl"
    hits = await store.call(recall.search_op(long, 5))
    await store.call(lambda db: db.set_trace_callback(None))
    assert len(asked) == recall.PROBED
    assert [h.session_id for h in hits] == ["old"]


@pytest.mark.parametrize("scope", ["sender", "all"])
async def test_a_first_session_searches_nothing(store: Store, scope: Scope) -> None:
    """Recall runs on every turn: where no other session is in scope (a person's first
    conversation, however full the database), it asks the index nothing."""
    await chat(store, "someone else", "telegram:1", "the pterodactyl is extinct")
    await chat(store, "first", "telegram:2" if scope == "sender" else None, "a pterodactyl?")
    first = await store.load("first")
    assert first is not None
    if scope == "all":
        await store.call(
            lambda db: db.execute("DELETE FROM sessions WHERE id = 'someone else'"), write=True
        )
    searched: list[str] = []

    def trace(statement: str) -> None:
        if "MATCH" in statement:
            searched.append(statement)

    await store.call(lambda db: db.set_trace_callback(trace))
    assert await SQLiteRecall(store, scope=scope).appendix(first) == ""
    await store.call(lambda db: db.set_trace_callback(None))
    assert searched == []


def test_a_store_from_before_sqlite_utils_keeps_its_recall_index(tmp_path: Path) -> None:
    """Migration 19 hands the index and its triggers to sqlite-utils: what was indexed
    before is found after, and new, changed and deleted messages keep it in step."""
    from rousseau.state.migrations import MIGRATIONS, migrate

    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as old:
        migrate(old, MIGRATIONS[:18])
        old.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('s', 0, 0)")
        old.execute(
            "INSERT INTO messages (session_id, role, content, text, created_at)"
            " VALUES ('s', 'user', '[]', 'the okapi lives in Ituri', 0)"
        )
    with Store(path) as store:  # opening it migrates it
        assert [h.session_id for h in store.search_sync("okapi")] == ["s"]
        store.append_message_sync("s", Message.user("a quokka smiles"))
        assert [h.text for h in store.search_sync("quokka")] == ["a quokka smiles"]

        def change(db: sqlite3.Connection) -> None:
            db.execute("UPDATE messages SET text = 'a wombat digs' WHERE text LIKE 'a quokka%'")
            db.execute("DELETE FROM messages WHERE text LIKE 'the okapi%'")

        store.call_sync(change, write=True)
        assert store.search_sync("quokka") == [] and store.search_sync("okapi") == []
        assert [h.text for h in store.search_sync("wombat")] == ["a wombat digs"]
        triggers = store.call_sync(
            lambda db: {
                r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            }
        )
    assert {"messages_ai", "messages_ad", "messages_au"} <= triggers  # sqlite-utils' own
    assert not {"messages_fts_insert", "messages_fts_delete"} & triggers
