"""One suite for every SessionStore backend: SQLite (the default) and PostgreSQL (a real
server, tests/postgres). Whatever the agent loop, the router, recall and the audit trail rely
on behaves the same on both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Compaction, Message, Role, StoreError, Usage
from rousseau.agent.protocols import ToolCallRecord
from rousseau.state import SessionStore, Store
from rousseau.state.recall import SQLiteRecall
from rousseau.state.store import StoreFullError
from tests.postgres.server import Postgres

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    made: SessionStore
    if request.param == "sqlite":
        made = Store(tmp_path / "state.db")
    else:
        from rousseau.state.postgres import PostgresStore

        server: Postgres = request.getfixturevalue("postgres")
        made = await PostgresStore.open(server.new_database())
    yield made
    await made.aclose()


async def said(
    store: SessionStore, session_id: str, *texts: str, owner: str | None = None, agent: str = ""
) -> None:
    await store.create_session(session_id)
    await store.set_scope(session_id, owner=owner, chat=owner, agent=agent or "default")
    for text in texts:
        await store.append_message(session_id, Message.user(text))
    await store.flush(session_id)


async def test_messages_come_back_in_order_with_their_usage_counted(store: SessionStore) -> None:
    session = await store.create_session(title="first")
    await store.append_message(session.id, Message.user("Hello there"))
    reply = Message.assistant("General Kenobi")
    await store.append_message(session.id, reply, Usage(input_tokens=10, output_tokens=3))
    await store.append_message(session.id, Message.user("ça va ? 🙂"), Usage(input_tokens=5))
    await store.flush(session.id)
    loaded = await store.load(session.id)
    assert loaded is not None
    assert [(m.role, m.text) for m in loaded.messages] == [
        (Role.USER, "Hello there"),
        (Role.ASSISTANT, "General Kenobi"),
        (Role.USER, "ça va ? 🙂"),
    ]
    [info] = await store.list_sessions()
    assert (info.id, info.title, info.message_count) == (session.id, "first", 3)
    assert (info.usage.input_tokens, info.usage.output_tokens) == (15, 3)
    assert await store.load("nope") is None
    again = await store.load_or_create(session.id)
    assert len(again.messages) == 3  # the existing one, not a new empty one


async def test_a_session_is_titled_by_its_first_words(store: SessionStore) -> None:
    await store.append_message("s1", Message.user("\n  plan the trip to Lyon\nthen more"))
    await store.append_message("s1", Message.user("something else"))
    await store.flush("s1")
    [info] = await store.list_sessions()
    assert info.title == "plan the trip to Lyon"


async def test_sessions_are_listed_newest_first_and_deleted_whole(store: SessionStore) -> None:
    for sid in ("a", "b", "c"):
        await said(store, sid, f"message in {sid}")
        await anyio.sleep(0.01)
    assert [i.id for i in await store.list_sessions()] == ["c", "b", "a"]
    assert [i.id for i in await store.list_sessions(limit=1)] == ["c"]
    assert await store.delete_session("b") is True
    assert await store.delete_session("b") is False
    assert await store.load("b") is None
    assert [i.id for i in await store.list_sessions()] == ["c", "a"]
    assert await store.search("message") and all(
        h.session_id != "b" for h in await store.search("message")
    )


async def test_compaction_hides_the_oldest_behind_a_summary(store: SessionStore) -> None:
    for i in range(6):
        await store.append_message("s", Message.user(f"turn {i}"))
    await store.flush("s")
    summary = Message.user("Summary: turns 0 to 3")
    await store.compact("s", Compaction(removed=4, summary=summary))
    loaded = await store.load("s")
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["Summary: turns 0 to 3", "turn 4", "turn 5"]
    assert loaded.cacheable_messages == 1
    # A second compaction counts the summary among what it removes.
    await store.compact("s", Compaction(removed=2, summary=Message.user("Summary: up to 4")))
    loaded = await store.load("s")
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["Summary: up to 4", "turn 5"]
    hits = await store.search("turn")  # what was compacted is still found
    assert len(hits) == 6
    with pytest.raises(StoreError):
        await store.compact("missing", Compaction(removed=1, summary=summary))


async def test_a_providers_own_session_id_is_kept(store: SessionStore) -> None:
    assert await store.get_external_session("s", "claudecli") is None
    await store.set_external_session("s", "claudecli", "ext-1")
    await store.set_external_session("s", "claudecli", "ext-2")
    assert await store.get_external_session("s", "claudecli") == "ext-2"
    assert await store.get_external_session("s", "other") is None


async def test_the_audit_trail_keeps_every_tool_call_newest_first(store: SessionStore) -> None:
    for i, session in enumerate(["s1", "s2", "s1"]):
        await store.record_tool_call(
            ToolCallRecord(
                session_id=session,
                tool="bash",
                input_digest=f"d{i}",
                decision="allow",
                decided_by="policy",
                reason="",
                started_at=1000.0 + i,
                duration=0.5,
                outcome="ok",
            )
        )
    await store.flush()
    assert [r.input_digest for r in await store.tool_calls()] == ["d2", "d1", "d0"]
    assert [r.input_digest for r in await store.tool_calls(session_id="s1")] == ["d2", "d0"]
    assert [r.input_digest for r in await store.tool_calls(limit=1)] == ["d2"]


async def test_search_needs_every_word_as_a_prefix_and_ignores_case_and_accents(
    store: SessionStore,
) -> None:
    await said(store, "s1", "The Café on Rue Cler opens at eight")
    await said(store, "s2", "cafe prices went up")
    await said(store, "s3", "nothing about it")
    assert {h.session_id for h in await store.search("CAFÉ")} == {"s1", "s2"}
    assert [h.session_id for h in await store.search("caf open")] == ["s1"]
    [hit] = await store.search("prices")
    assert (hit.title, hit.role) == ("cafe prices went up", Role.USER)
    assert "prices" in hit.text
    assert await store.search("") == [] and await store.search("?!") == []


@pytest.mark.parametrize(
    "hostile",
    ["'", "\\", "a' | 'b", "!", "&", ":*", "foo:*", "(", "<->", 'NEAR("a" "b")', "text:x"],
)
async def test_no_text_breaks_search_or_recall(store: SessionStore, hostile: str) -> None:
    await said(store, "s", f"a message with {hostile} inside")
    await store.search(hostile)
    await store.recall(hostile, 5)  # no query syntax gets through: no error


async def test_recall_keeps_to_the_owner_the_agent_and_other_sessions(
    store: SessionStore,
) -> None:
    await said(store, "alice", "Alice's salary is 90000 euros", owner="telegram:1")
    await said(store, "alice2", "the salary review is in May", owner="telegram:1")
    await said(store, "bob", "what is the salary?", owner="telegram:2")
    await said(store, "local", "my salary is secret")
    await said(store, "other_agent", "salary spreadsheet", owner="telegram:1", agent="work")
    mine = await store.recall("salary", 10, exclude="alice", scope_of="alice", agent="default")
    assert [h.session_id for h in mine] == ["alice2"]
    bobs = await store.recall("salary", 10, exclude="bob", scope_of="bob", agent="default")
    assert bobs == []
    local = await store.recall("salary", 10, scope_of="local", agent="default")
    assert [h.session_id for h in local] == ["local"]
    everyone = await store.recall("salary", 10, agent="default")
    assert {h.session_id for h in everyone} == {"alice", "alice2", "bob", "local"}
    assert {h.session_id for h in await store.recall("salary", 10)} == {
        "alice",
        "alice2",
        "bob",
        "local",
        "other_agent",
    }
    assert [h.session_id for h in await store.recall("salary", 2)][:2] and (
        len(await store.recall("salary", 2)) == 2
    )


async def test_recall_prefers_rare_words_and_serves_the_agent_loop(store: SessionStore) -> None:
    await said(store, "old", "My locker code is 4711, remember it", owner="telegram:42")
    await said(store, "noise", "The weather was fine yesterday", owner="telegram:42")
    for i in range(30):  # a common word that says little
        await said(store, f"common{i}", f"the weather report {i}", owner="telegram:42")
    await said(store, "now", "what was my locker code and the weather?", owner="telegram:42")
    current = await store.load("now")
    assert current is not None
    appendix = await SQLiteRecall(store, top_k=3).appendix(current)
    assert "4711" in appendix
    assert "what was my locker code" not in appendix  # never the current session


async def test_an_imported_session_keeps_its_times_and_is_copied_once(
    store: SessionStore,
) -> None:
    from rousseau.state.records import ImportedSession

    said_at = [1_700_000_000.5, 1_700_000_060.25]
    imported = ImportedSession(
        id="go1",
        title="chat: 4915112345678@s.whatsapp.net",
        created_at=1_699_999_999.0,
        updated_at=1_700_000_061.0,
        owner="whatsapp:4915112345678",
        chat="whatsapp:4915112345678@s.whatsapp.net",
        messages=[
            (Message.user("what is on the shopping list?"), said_at[0]),
            (Message.assistant("milk and bread"), said_at[1]),
        ],
        chat_key="whatsapp:4915112345678@s.whatsapp.net",
    )
    first = await store.import_session(imported)
    assert (first.copied, first.bound) == (True, True)
    loaded = await store.load("go1")
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["what is on the shopping list?", "milk and bread"]
    info = await store.info("go1")
    assert info is not None
    assert (info.created_at, info.updated_at, info.message_count) == (
        1_699_999_999.0,
        1_700_000_061.0,
        2,
    )
    assert [h.session_id for h in await store.search("milk")] == ["go1"]
    recalled = await store.recall("shopping", 5, agent="default")
    assert [(r.session_id, r.created_at) for r in recalled] == [("go1", said_at[0])]

    again = await store.import_session(imported)
    assert again.copied is False
    another = await store.import_session(
        ImportedSession(
            id="go2",
            title="",
            created_at=1.0,
            updated_at=2.0,
            owner=None,
            chat=None,
            messages=[(Message.user("older"), 1.5)],
            chat_key="whatsapp:4915112345678@s.whatsapp.net",
        )
    )
    assert (another.copied, another.bound) == (True, False)  # the chat keeps its session
    reloaded = await store.load("go1")
    assert reloaded is not None and len(reloaded.messages) == 2


async def test_a_full_disk_under_postgresql_is_a_full_store(postgres: Postgres) -> None:
    """PostgreSQL's disk_full (a table that cannot grow) is SQLite's StoreFullError too: the
    router then waits for space with the message unacknowledged, where it gave the message
    up after three tries."""
    from rousseau.state.postgres import PostgresStore

    store = await PostgresStore.open(postgres.new_database())
    full = "DO $$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$"
    for connection in (store.transaction, store.urgent):
        with pytest.raises(StoreFullError):
            async with connection() as db:
                await db.execute(full)
    await store.aclose()
