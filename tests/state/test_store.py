"""The SQLite store: persistence, migrations, pragmas, concurrency, search and deletion."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Content, Message, Role, StoreError, ToolResult, ToolUse
from rousseau.state import Store
from rousseau.state.migrations import MIGRATIONS

pytestmark = pytest.mark.anyio


def sql(store: Store, query: str) -> list[tuple[object, ...]]:
    """Run a query on the store's own connection (it belongs to the worker thread)."""
    return store._worker.call_sync(lambda db: db.execute(query).fetchall())


def tool_exchange() -> list[Message]:
    return [
        Message.user("list files"),
        Message(
            role=Role.ASSISTANT,
            content=[
                Content.of_text("Looking."),
                Content.of_tool_use(ToolUse(id="t1", name="bash", input={"command": "ls"})),
            ],
        ),
        Message(
            role=Role.USER,
            content=[
                Content.of_tool_result(ToolResult(tool_use_id="t1", content="a\nb", is_error=True))
            ],
        ),
        Message.assistant("Two files: a and b."),
    ]


async def test_reopen_keeps_sessions_and_messages(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = Store(db)
    s = await store.create_session()
    for m in tool_exchange():
        await store.append_message(s.id, m)
    await store.aclose()

    store = Store(db)
    loaded = await store.load(s.id)
    assert loaded is not None
    assert loaded.messages == tool_exchange()
    [info] = await store.list_sessions()
    assert (info.id, info.title, info.message_count) == (s.id, "list files", 4)
    store.close()


async def test_only_its_user_can_read_the_store(tmp_path: Path) -> None:
    db = tmp_path / "home" / "state" / "sessions.db"
    store = Store(db)
    s = await store.create_session()
    await store.append_message(s.id, Message.user("my bank password is ..."))
    made = [db, db.with_name("sessions.db-wal"), db.with_name("sessions.db-shm")]
    assert {f"{p.name} {p.stat().st_mode & 0o777:o}" for p in made if p.exists()} == {
        f"{p.name} 600" for p in made if p.exists()
    }
    assert db.with_name("sessions.db-wal").exists()  # the mode of a file SQLite made itself
    for folder in (db.parent, db.parent.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    store.close()


async def test_one_row_per_message_and_pragmas(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = Store(db)
    for m in tool_exchange():
        await store.append_message("abc", m)
    await store.flush()
    assert sql(store, "PRAGMA journal_mode") == [("wal",)]
    assert sql(store, "PRAGMA busy_timeout") == [(15000,)]
    assert sql(store, "PRAGMA foreign_keys") == [(1,)]
    rows = sql(store, "SELECT role, text FROM messages ORDER BY id")
    assert rows == [
        ("user", "list files"),
        ("assistant", "Looking."),
        ("user", ""),
        ("assistant", "Two files: a and b."),
    ]
    versions = [r[0] for r in sql(store, "SELECT version FROM schema_migrations")]
    assert versions == [m.version for m in MIGRATIONS]
    store.close()


async def test_close_checkpoints_the_wal(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = Store(db)
    await store.append_message("x", Message.user("hello"))
    store.close()
    wal = Path(str(db) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    # Readable without the WAL by a plain client.
    assert sqlite3.connect(db).execute("SELECT count(*) FROM messages").fetchone()[0] == 1


async def test_migrations_are_applied_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Store(db).close()
    Store(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)


def test_concurrent_writers_in_threads_do_not_fail(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    stores = [Store(db) for _ in range(4)]
    errors: list[BaseException] = []

    def write(store: Store, n: int) -> None:
        try:
            for i in range(100):
                store.append_message_sync(f"session-{n % 2}", Message.user(f"{n}-{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = {i.id: i.message_count for i in stores[0].list_sync()}
    assert counts == {"session-0": 200, "session-1": 200}
    for s in stores:
        s.close()


def test_concurrent_writer_processes_do_not_fail(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    script = (
        "import sys\n"
        "from rousseau.agent import Message\n"
        "from rousseau.state import Store\n"
        "s = Store(sys.argv[1])\n"
        "for i in range(200): s.append_message_sync('shared', Message.user(sys.argv[2] + str(i)))\n"
        "s.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db), f"p{n}-"]) for n in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    store = Store(db)
    [info] = store.list_sync()
    assert info.message_count == 600
    store.close()


async def test_search_list_and_delete() -> None:
    store = Store(":memory:")
    await store.append_message("a", Message.user("the 100% plan"))
    await store.append_message("b", Message.user("another thing"))
    hits = await store.search("100%")
    assert [(h.session_id, h.text) for h in hits] == [("a", "the 100% plan")]
    assert await store.search("_") == []
    assert {s.id for s in await store.list_sessions()} == {"a", "b"}
    assert await store.delete_session("a") is True
    assert await store.delete_session("a") is False
    assert await store.load("a") is None
    assert sql(store, "SELECT count(*) FROM messages") == [(1,)]
    store.close()


async def test_load_or_create_and_titles() -> None:
    store = Store(":memory:")
    s = await store.load_or_create("fixed-id")
    assert s.id == "fixed-id" and s.messages == []
    long = "x" * 200
    await store.append_message("fixed-id", Message.user("\n\n" + long))
    [info] = await store.list_sessions()
    assert len(info.title) == 60 and info.title.endswith("…")
    store.close()


async def test_queued_writes_are_ordered_and_failures_logged() -> None:
    store = Store(":memory:")
    for i in range(3000):  # more than the pending bound, so some callers wait
        await store.append_message("s", Message.user(str(i)))
    loaded = await store.load("s")
    assert loaded is not None
    assert [m.text for m in loaded.messages] == [str(i) for i in range(3000)]
    # A write that fails on the worker is reported (logged, and by the flush of its
    # session), and later writes still land.
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        await store.submit(lambda db: db.execute("INSERT INTO nope VALUES (1)"), key="s")
        with pytest.raises(StoreError, match="no such table"):
            await store.flush("s")
    await store.append_message("s", Message.user("after"))
    loaded = await store.load("s")
    assert loaded is not None and loaded.messages[-1].text == "after"
    assert [e["event"] for e in logs] == ["store.write_failed"]
    assert "no such table: nope" in logs[0]["error"]
    store.close()


async def test_closed_store_and_bad_path_raise_store_error(tmp_path: Path) -> None:
    store = Store(":memory:")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.list_sessions()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises((StoreError, OSError)):
        Store(blocker / "sub" / "s.db")


async def test_usage_totals_per_session_and_overall() -> None:
    from rousseau.agent import Usage

    store = Store(":memory:")
    await store.append_message("a", Message.user("q"))
    await store.append_message(
        "a", Message.assistant("x"), Usage(input_tokens=10, output_tokens=4, cache_read_tokens=3)
    )
    await store.append_message(
        "a", Message.assistant("y"), Usage(input_tokens=5, output_tokens=1, cache_write_tokens=2)
    )
    await store.append_message("b", Message.assistant("z"), Usage(input_tokens=1))
    await store.flush()
    info = store.info_sync("a")
    assert info is not None
    assert info.usage == Usage(
        input_tokens=15, output_tokens=5, cache_read_tokens=3, cache_write_tokens=2
    )
    count, total = store.totals_sync()
    assert count == 2 and total.input_tokens == 16
    store.close()


async def test_external_session_ids() -> None:
    store = Store(":memory:")
    assert await store.get_external_session("s", "claudecli") is None
    await store.set_external_session("s", "claudecli", "uuid-1")
    await store.set_external_session("s", "claudecli", "uuid-2")
    assert await store.get_external_session("s", "claudecli") == "uuid-2"
    assert await store.delete_session("s")
    assert await store.get_external_session("s", "claudecli") is None
    store.close()


def test_store_closes_as_a_context_manager(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        store.append_message_sync("a", Message.user("hi"))
    with pytest.raises(StoreError, match="closed"):
        store.list_sync()


def test_the_writer_holds_at_most_a_mebibyte_of_pages(tmp_path: Path) -> None:
    """SQLite's default page cache (2 MiB) filled under load and was a fifth of the daemon's
    memory growth over 20,000 messages; the writer reads little but index pages."""
    from rousseau.state.store import PAGE_CACHE_KIB

    store = Store(tmp_path / "s.db")
    try:
        size = store.call_sync(lambda db: db.execute("PRAGMA cache_size").fetchone()[0])
        assert size == -PAGE_CACHE_KIB == -1024
    finally:
        store.close()


async def test_the_log_reaches_the_main_file_without_a_commit_waiting_for_it(
    tmp_path: Path,
) -> None:
    """A commit that took the WAL past 1,000 pages copied it into the main file itself, and
    every write queued behind it waited for the disk (the tail of reply latency under load).
    The writer now leaves that to a thread of its own, which does it a moment after writes
    land; a commit checkpoints only as a backstop, at 10,000 pages."""
    import os
    import time

    from rousseau.state.checkpoint import BACKSTOP_PAGES

    path = tmp_path / "s.db"
    store = Store(path)
    try:
        limit = store.call_sync(lambda db: db.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        assert limit == BACKSTOP_PAGES
        before = os.path.getsize(path)
        await store.create_session("s1")
        # 400 KB: a hundred pages of log, far below any commit's own checkpoint.
        await store.append_message("s1", Message.user("x" * 400_000))
        await store.flush("s1")
        deadline = time.monotonic() + 10
        while os.path.getsize(path) < before + 400_000:
            assert time.monotonic() < deadline, "the log never reached the main file"
            await anyio.sleep(0.05)
    finally:
        store.close()
