"""The database thread survives every SQLite failure and never leaves a caller waiting."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from contextvars import Context
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup

from rousseau.agent import Message, StoreError
from rousseau.state import Store
from rousseau.state import worker as worker_module
from rousseau.state.store import StoreFullError
from rousseau.state.worker import DBWorker, WorkerTimeout

pytestmark = pytest.mark.anyio


def _filling(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO blobs VALUES (randomblob(20000))")


async def _hold(worker: DBWorker, tg: TaskGroup) -> threading.Event:
    """Hold the database thread in a job until the returned gate is set, so that what is
    queued next waits behind it; returns once the thread is held."""
    gate, holding = threading.Event(), threading.Event()

    def held(db: sqlite3.Connection) -> None:
        holding.set()
        gate.wait(5)

    tg.start_soon(worker.call, held)
    assert await anyio.to_thread.run_sync(holding.wait, 5)
    return gate


async def _queued(worker: DBWorker, hand_overs: int) -> None:
    """Wait until this many hand-overs (or urgent calls) wait for the held thread."""
    with anyio.fail_after(5):
        while worker.queued < hand_overs:
            await anyio.lowlevel.checkpoint()


def _worker(path: Path) -> DBWorker:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS blobs (b BLOB)")
        return conn

    return DBWorker(connect)


async def test_a_full_database_fails_the_writes_and_the_thread_goes_on(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    pages = await worker.call(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
    await worker.call(lambda db: db.execute(f"PRAGMA max_page_count = {pages + 20}"))
    # Queued together, these share one transaction of savepoints until the file is full.
    lost: list[BaseException] = []
    worker.on_error = lost.append
    for _ in range(40):
        await worker.submit(_filling, key="s")
    with pytest.raises(sqlite3.Error, match="full"):
        await worker.call(_filling, write=True)
    await worker.flush()
    assert lost, "the failed queued writes were reported"
    with pytest.raises(sqlite3.Error, match="full"):
        worker.raise_lost("s")
    worker.raise_lost("s")  # reported once
    # Space comes back: the same thread takes writes again.
    await worker.call(lambda db: db.execute("PRAGMA max_page_count = 1000000"))
    await worker.call(_filling, write=True)
    count = await worker.call(lambda db: db.execute("SELECT count(*) FROM blobs").fetchone()[0])
    assert count >= 1
    worker.stop()


async def test_a_lost_savepoint_settles_every_job_of_the_batch(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")

    def ends_the_transaction(db: sqlite3.Connection) -> None:
        db.execute("ROLLBACK")  # as SQLite does by itself on some errors

    results = []
    async with anyio.create_task_group() as tg:

        async def write(fn: object) -> None:
            try:
                await worker.call(fn, write=True)  # type: ignore[arg-type]
                results.append("ok")
            except Exception as exc:
                results.append(type(exc).__name__)

        # Hold the thread so the three writes queue up into one batch.
        gate = await _hold(worker, tg)
        for fn in (_filling, ends_the_transaction, _filling):
            tg.start_soon(write, fn)
        await _queued(worker, 1)  # the three, handed over together
        gate.set()
    assert len(results) == 3 and "ok" not in results  # nothing of the lost batch counts
    await worker.call(_filling, write=True)  # and the thread still serves
    worker.stop()


async def test_a_stuck_operation_times_out_and_stopping_never_hangs(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    worker.timeout = 0.3
    release = threading.Event()
    with pytest.raises(WorkerTimeout):
        await worker.call(lambda db: release.wait(10))
    with pytest.raises(WorkerTimeout):
        worker.call_sync(lambda db: None)  # queued behind the stuck one
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        worker.stop(final=lambda db: None, timeout=0.3)
    assert worker.stopped and time.monotonic() - started < 5
    release.set()


async def test_a_failed_history_write_fails_the_flush_of_its_session(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.append_message("s", Message.user("kept"))
    await store.flush("s")
    await store.submit(lambda db: db.execute("INSERT INTO nope VALUES (1)"), key="s")
    await store.flush("other")  # another session's flush is not this one's failure
    with pytest.raises(StoreError, match="no such table"):
        await store.flush("s")
    await store.flush("s")  # reported once
    store.close()


async def test_a_full_store_says_so_once_and_recovers(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    store = Store(tmp_path / "s.db")
    pages = store.call_sync(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
    store.call_sync(lambda db: db.execute(f"PRAGMA max_page_count = {pages + 2}"))
    big = "x" * 50_000
    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(StoreFullError):
                await store.call(
                    lambda db: db.execute(
                        "INSERT INTO sessions (id, title, created_at, updated_at)"
                        " VALUES (hex(randomblob(8)), ?, 0, 0)",
                        (big,),
                    ),
                    write=True,
                )
        assert store.full
        store.call_sync(lambda db: db.execute("PRAGMA max_page_count = 1000000"))
        await store.create_session("after")
    assert not store.full
    events = [e["event"] for e in logs]
    assert events.count("store.full") == 1 and events[-1] == "store.recovered"
    store.close()


async def test_an_urgent_write_goes_ahead_of_the_queue(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    order: list[str] = []
    async with anyio.create_task_group() as tg:
        gate = await _hold(worker, tg)
        for name in ("a", "b", "c"):
            await worker.submit(lambda db, name=name: order.append(name))
        tg.start_soon(
            lambda: worker.call(lambda db: order.append("urgent"), write=True, urgent=True)
        )
        await _queued(worker, 2)  # the three writes, then the urgent one
        gate.set()
    await worker.flush()
    assert order == ["urgent", "a", "b", "c"]
    worker.stop()


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks other threads hand it (each one wakes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        self.woken += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def test_calls_awaited_together_are_answered_with_one_wake_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However long the thread takes (a loaded machine may stall it), it answers at once.
    monkeypatch.setattr(worker_module, "ANSWER_WITHIN", 60.0)
    worker = _worker(tmp_path / "w.db")

    def number(i: int) -> Callable[[sqlite3.Connection], int]:
        return lambda db: i

    async def twenty() -> list[int]:
        return await asyncio.gather(*(worker.call(number(i)) for i in range(20)))

    with asyncio.Runner(loop_factory=_CountingLoop) as runner:
        assert runner.run(twenty()) == list(range(20))
        loop = runner.get_loop()
        assert isinstance(loop, _CountingLoop)
        assert loop.woken == 1
    worker.stop()


async def test_writes_queued_in_one_step_share_one_commit(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    statements: list[str] = []
    await worker.call(lambda db: db.set_trace_callback(statements.append))
    for _ in range(10):
        await worker.submit(_filling)
    await worker.call(_filling, write=True)
    assert statements.count("COMMIT") == 1
    count = await worker.call(lambda db: db.execute("SELECT count(*) FROM blobs").fetchone()[0])
    assert count == 11
    worker.stop()


async def test_what_the_loop_queued_runs_before_a_blocking_call(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    for _ in range(3):
        await worker.submit(_filling)
    # Blocking the loop, so it cannot have handed the writes over to the thread yet.
    count = worker.call_sync(lambda db: db.execute("SELECT count(*) FROM blobs").fetchone()[0])
    assert count == 3
    worker.stop()


async def test_a_slow_job_queued_later_holds_back_no_answer(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    answered, slow_done = threading.Event(), threading.Event()
    quick_answered_while_slow_ran: list[bool] = []

    def slow(db: sqlite3.Connection) -> None:
        answered.wait(10)  # slow until the quick call is answered (or never is)
        slow_done.set()

    async def quick() -> None:
        await worker.call(lambda db: None)
        quick_answered_while_slow_ran.append(not slow_done.is_set())
        answered.set()

    async with anyio.create_task_group() as tg:
        gate = await _hold(worker, tg)
        tg.start_soon(quick)
        await _queued(worker, 1)  # handed over: queued behind the gate
        tg.start_soon(worker.call, slow)
        await _queued(worker, 2)  # handed over after it, on its own
        gate.set()
    assert quick_answered_while_slow_ran == [True]
    worker.stop()


def _failing(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO no_such_table VALUES (1)")


async def _count(worker: DBWorker) -> int:
    return int(await worker.call(lambda db: db.execute("SELECT count(*) FROM blobs").fetchone()[0]))


async def _after_a_lost_write(tmp_path: Path, earlier: bool) -> DBWorker:
    """A worker with a write under "s" queued and failing: in a batch of its own already
    (`earlier`), or still to come in the next one."""
    worker = _worker(tmp_path / "w.db")
    worker.on_error = lambda exc: None
    await worker.submit(_failing, key="s")
    if earlier:
        await worker.flush()  # the failure is committed around, and remembered
    return worker


async def test_a_write_after_a_key_commits_with_the_writes_queued_under_it(
    tmp_path: Path,
) -> None:
    worker = _worker(tmp_path / "w.db")
    statements: list[str] = []
    await worker.call(lambda db: db.set_trace_callback(statements.append))
    await worker.submit(_filling, key="s")
    await worker.submit(_filling, key="s")
    await worker.call(_filling, write=True, after="s")
    assert statements.count("COMMIT") == 1, "one transaction, one round trip"
    assert await _count(worker) == 3
    worker.stop()


@pytest.mark.parametrize("earlier", [False, True], ids=["same batch", "earlier batch"])
async def test_a_write_after_a_failed_write_of_its_key_is_not_made(
    tmp_path: Path, earlier: bool
) -> None:
    worker = await _after_a_lost_write(tmp_path, earlier)
    await worker.submit(_filling, key="other")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await worker.call(_filling, write=True, after="s")
    assert await _count(worker) == 1, "only the other key's write was made"
    worker.raise_lost("s")  # the failure was reported once, by the write after it
    await worker.call(_filling, write=True, after="s")  # and is not held against the next
    assert await _count(worker) == 2
    worker.stop()


async def test_a_failed_write_of_another_key_does_not_stop_a_write_after(
    tmp_path: Path,
) -> None:
    worker = _worker(tmp_path / "w.db")
    worker.on_error = lambda exc: None
    await worker.submit(_failing, key="other")
    await worker.call(_filling, write=True, after="s")
    assert await _count(worker) == 1
    with pytest.raises(sqlite3.OperationalError):
        worker.raise_lost("other")
    worker.stop()


async def test_urgent_writes_waiting_together_share_one_commit(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "w.db")
    worker.on_error = lambda exc: None
    statements: list[str] = []
    await worker.call(lambda db: db.set_trace_callback(statements.append))
    outcomes: list[str] = []

    async def urgent(fn: Callable[[sqlite3.Connection], None]) -> None:
        try:
            await worker.call(fn, write=True, urgent=True)
            outcomes.append("ok")
        except sqlite3.Error:
            outcomes.append("failed")

    async with anyio.create_task_group() as tg:
        gate = await _hold(worker, tg)
        for fn in (_filling, _failing, _filling):
            tg.start_soon(urgent, fn)
        await _queued(worker, 3)  # each urgent call wakes the thread
        gate.set()
    assert statements.count("COMMIT") == 1
    assert sorted(outcomes) == ["failed", "ok", "ok"], "a failure spares the others"
    assert await _count(worker) == 2
    worker.stop()


@pytest.mark.parametrize("earlier", [False, True], ids=["same batch", "earlier batch"])
async def test_a_queued_write_after_a_failed_one_of_its_key_is_not_made(
    tmp_path: Path, earlier: bool
) -> None:
    worker = await _after_a_lost_write(tmp_path, earlier)
    await worker.submit(_filling, key="s", after="s")
    await worker.flush()
    assert await _count(worker) == 0, "not made: the write it follows was lost"
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        worker.raise_lost("s")  # still reported, to whoever checks the key next
    worker.raise_lost("s")  # once
    worker.stop()


async def test_a_blocking_write_after_a_failed_write_of_its_key_is_not_made(
    tmp_path: Path,
) -> None:
    """The same, for a thread's (or another async library's) blocking call."""
    worker = await _after_a_lost_write(tmp_path, earlier=True)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        worker.call_sync(_filling, write=True, after="s")
    worker.call_sync(_filling, write=True, after="s")
    assert await _count(worker) == 1
    worker.stop()
