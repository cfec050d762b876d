"""One thread owns the SQLite connection; async callers queue work to it and await the result.

Why not anyio.to_thread: a hop through the shared pool costs more than the write itself, and a
dedicated thread lets writes queued together share one commit (group commit), which is what
keeps persistence cheap when many sessions are talking at once.

Waking a thread costs more CPU than most of the operations it runs, so both directions are
batched: what an event loop queues in one step reaches the thread as one hand-over, and the
thread answers the calls of one hand-over with one wake-up of their loop.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import anyio
import structlog

T = TypeVar("T")
log = structlog.get_logger("rousseau.state")
Op = Callable[[sqlite3.Connection], Any]

_MAX_BATCH = 256
MAX_PENDING = 1024
"""Queued-and-forgotten writes allowed at once before `submit` makes its caller wait."""
MAX_LOST = 1024
"""Failed queued writes remembered (by key) until someone asks; the oldest are forgotten."""
DEFAULT_TIMEOUT = 60.0
"""No wait on the thread lasts longer (SQLite's own busy timeout is 15 s)."""
ANSWER_WITHIN = 0.002
"""Finished calls of one hand-over are answered together, but none waits longer than this
for the rest (the answers also go out before the next hand-over's work starts)."""


class _Job:
    __slots__ = ("after", "done", "error", "fn", "key", "reported", "result", "write")

    def __init__(
        self,
        fn: Op,
        write: bool,
        done: Callable[[_Job], None],
        *,
        key: str | None = None,
        after: str | None = None,
    ) -> None:
        self.fn = fn
        self.write = write
        self.done = done
        self.key = key
        """A queued write's key (see DBWorker.submit)."""
        self.after = after
        """A write made only if no queued write under this key failed (see DBWorker.call)."""
        self.reported = False
        """This queued write's failure went to the caller of a write `after` its key."""
        self.result: Any = None
        self.error: BaseException | None = None


_WAKE = _Job(lambda conn: None, False, lambda job: None)
"""Queued behind an urgent job only to wake the thread."""


class WorkerTimeout(TimeoutError):
    """The database thread did not answer in time (it may be stuck on a lock or the disk)."""


class DBWorker:
    """Runs operations on one connection in one thread, in the order they were submitted.

    The thread survives any error of any operation: each one's failure goes to its caller.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        name: str = "rousseau-db",
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._jobs: queue.SimpleQueue[_Job | list[_Job] | None] = queue.SimpleQueue()
        self._urgent: deque[_Job] = deque()
        # An event loop's jobs not yet handed over, and the loop that will hand them over.
        self._held: list[_Job] = []
        self._held_lock = threading.Lock()
        self._handing: asyncio.AbstractEventLoop | None = None
        # The thread's own: jobs handed over and not yet taken, and answers not yet sent.
        self._backlog: deque[_Job] = deque()
        self._answers: list[tuple[asyncio.Future[Any], _Job]] = []
        self._answers_since = 0.0
        ready: Future[sqlite3.Connection] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(connect, ready), name=name, daemon=True
        )
        self._thread.start()
        self.conn = ready.result()  # re-raises a failure to open
        self.timeout = timeout
        """How long any wait on the thread may last before it is abandoned with an error."""
        self._stopped = False
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._lost: OrderedDict[str, BaseException] = OrderedDict()
        self.on_error: Callable[[BaseException], None] = lambda exc: None
        self.wrote = threading.Event()
        """Set after each commit (see rousseau.state.checkpoint)."""

    # -- submitting ------------------------------------------------------------------------

    async def call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool = False,
        urgent: bool = False,
        after: str | None = None,
    ) -> T:
        """Run `fn(conn)` on the worker and await its result (write: inside a transaction).

        `urgent` runs it ahead of the queued work (in a transaction of the urgent writes
        waiting with it, each in a savepoint): for a write whose delay is a risk in itself,
        such as recording that a message went out.

        A write `after` a key is made only if every write queued under that key before it
        was: else it raises the first such failure (reported then, to this caller alone).
        Queued in the same step as those writes, it commits with them: their flush and this
        write in one round trip."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: take the portable, slower path
            return await anyio.to_thread.run_sync(
                lambda: self.call_sync(fn, write=write, after=after)
            )
        future: asyncio.Future[Any] = loop.create_future()
        job = _Job(fn, write, partial(self._answer, future), after=after)
        if urgent:
            if self._stopped:
                raise RuntimeError("the database worker is stopped")
            self._urgent.append(job)
            self._jobs.put(_WAKE)
        else:
            self._hold(job, loop)
        # A timer on the future, not anyio.fail_after: a cancel scope per call cost more CPU
        # than the rest of the call's round trip, and the daemon makes a dozen per message.
        expiry = loop.call_later(self.timeout, _expire, future, self.timeout)
        try:
            return await future  # type: ignore[no-any-return]
        finally:
            expiry.cancel()

    async def submit(self, fn: Op, *, key: str | None = None, after: str | None = None) -> None:
        """Queue a write without waiting for it; later work on this worker runs after it.

        A failure is reported to `on_error` and, with a `key`, remembered until
        `raise_lost(key)` reports it. A write `after` a key is not made if a write queued
        under that key before it failed: it fails with that error (remembered under its own
        key). Past MAX_PENDING queued writes, wait for them.
        """

        def done(job: _Job) -> None:
            with self._pending_lock:
                self._pending -= 1
                if job.error is not None and key is not None and not job.reported:
                    self._lost[key] = job.error
                    while len(self._lost) > MAX_LOST:
                        self._lost.popitem(last=False)
            if job.error is not None:
                self.on_error(job.error)

        with self._pending_lock:
            self._pending += 1
            crowded = self._pending > MAX_PENDING
        job = _Job(fn, True, done, key=key, after=after)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: straight to the thread
            self._submit(job)
        else:
            self._hold(job, loop)
        if crowded:
            await self.call(_nothing)

    def raise_lost(self, key: str | None) -> None:
        """Raise the error of a queued write under `key` that failed (None: under any key)."""
        with self._pending_lock:
            if key is None:
                error = self._lost.popitem(last=False)[1] if self._lost else None
                self._lost.clear()
            else:
                error = self._lost.pop(key, None)
        if error is not None:
            raise error

    async def flush(self) -> None:
        """Wait until everything queued so far has run."""
        await self.call(_nothing)

    def call_sync(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool = False,
        timeout: float | None = None,
        after: str | None = None,
    ) -> T:
        """Run `fn(conn)` on the worker and block until it is done (for threads and the CLI;
        `after` as in `call`)."""
        finished = threading.Event()
        job = _Job(fn, write, lambda _: finished.set(), after=after)
        self._hand_over()  # after what this loop queued, if called on one
        self._submit(job)
        limit = self.timeout if timeout is None else timeout
        if not finished.wait(limit):
            raise WorkerTimeout(f"no answer from the database within {limit:g} s")
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def stop(self, final: Op | None = None, *, timeout: float | None = None) -> None:
        """Run `final` (if any) after everything queued, then close the connection.

        Waits at most `timeout` (default: the worker's); a thread still busy then is left to
        finish on its own (it is a daemon thread), so stopping never hangs.
        """
        if self._stopped:
            return
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            if final is not None:
                self.call_sync(final, timeout=limit)
        finally:
            self._hand_over()
            self._stopped = True
            self._jobs.put(None)
            self._thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def queued(self) -> int:
        """Hand-overs the thread has not taken up yet (each urgent call counts as one): how
        a test that holds the thread knows the work it orders is queued behind it."""
        return self._jobs.qsize()

    def _hold(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        """Keep `job` until the loop's current step ends, then hand all it queued over."""
        if self._stopped:
            raise RuntimeError("the database worker is stopped")
        with self._held_lock:
            self._held.append(job)
            if self._handing is loop:
                return
            # Another loop's hand-over may never run (that loop may have closed): this
            # one's takes what is held, and a second is harmless.
            self._handing = loop
        loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        with self._held_lock:
            jobs, self._held = self._held, []
            self._handing = None
        if jobs:
            self._jobs.put(jobs)

    def _submit(self, job: _Job) -> None:
        if self._stopped:
            raise RuntimeError("the database worker is stopped")
        self._jobs.put(job)

    # -- the worker thread -----------------------------------------------------------------

    def _serve(
        self, connect: Callable[[], sqlite3.Connection], ready: Future[sqlite3.Connection]
    ) -> None:
        try:
            conn = connect()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(conn)
        try:
            while True:
                try:
                    if not self._serve_batch(conn):
                        return
                except Exception:  # pragma: no cover - every job's failure is caught below
                    log.exception("store.worker_error")
                    _rollback(conn)
        finally:
            conn.close()

    def _answer(self, future: asyncio.Future[Any], job: _Job) -> None:
        if not self._answers:
            self._answers_since = time.monotonic()
        self._answers.append((future, job))

    def _send_answers(self) -> None:
        """Settle the finished calls, with one wake-up of each loop they came from."""
        answers, self._answers = self._answers, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Job]]] = {}
        for future, job in answers:
            by_loop.setdefault(future.get_loop(), []).append((future, job))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_each, settled)
            except RuntimeError:  # the loop closed while the jobs ran: nobody is waiting
                pass

    def _next(self, *, block: bool) -> _Job | None:
        """The next job handed over (raises queue.Empty when none waits and not `block`).
        The calls of one hand-over are answered together, before the next one's work."""
        while not self._backlog:
            if self._answers:
                self._send_answers()
            item = self._jobs.get() if block else self._jobs.get_nowait()
            if not isinstance(item, list):
                return item
            self._backlog.extend(item)
        return self._backlog.popleft()

    def _serve_batch(self, conn: sqlite3.Connection) -> bool:
        """Take the next job and the writes queued behind it; False once told to stop."""
        go_on = False
        try:
            go_on = self._serve_next(conn)
        finally:
            if self._answers and (
                not go_on or time.monotonic() - self._answers_since >= ANSWER_WITHIN
            ):
                self._send_answers()
        return go_on

    def _serve_next(self, conn: sqlite3.Connection) -> bool:
        job = self._next(block=True)
        self._serve_urgent(conn)
        if job is None:
            return False
        if job is _WAKE:
            return True
        if not job.write:
            _run(conn, job)
            _done(job)
            return True
        batch = [job]
        go_on = True
        while len(batch) < _MAX_BATCH:
            try:
                nxt = self._next(block=False)
            except queue.Empty:
                break
            if nxt is None:
                go_on = False
                break
            if nxt is _WAKE:
                continue
            if not nxt.write:
                self._commit(conn, batch)
                _run(conn, nxt)
                _done(nxt)
                batch = []
                continue
            batch.append(nxt)
        self._commit(conn, batch)
        self._serve_urgent(conn)
        return go_on

    def _serve_urgent(self, conn: sqlite3.Connection) -> None:
        """The urgent jobs, in order; the writes waiting together share one commit."""
        while self._urgent:
            writes: list[_Job] = []
            while self._urgent and self._urgent[0].write:
                writes.append(self._urgent.popleft())
            self._commit(conn, writes)
            if self._urgent and not self._urgent[0].write:
                job = self._urgent.popleft()
                _run(conn, job)
                _done(job)

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        """Run writes in one transaction, each in a savepoint so one failure spares the rest.

        Any statement may fail (a full disk, an I/O error): SQLite may then have rolled the
        whole transaction back on its own, taking every savepoint with it. Whatever happens,
        each job is settled (with the error if its write is not on disk) and the thread goes on.
        """
        if not batch:
            return
        alone = len(batch) == 1
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            _settle_all(batch, exc)
            return
        lost = self._run_batch(conn, batch)
        if lost is None and not conn.in_transaction:  # SQLite rolled back by itself
            lost = next((j.error for j in batch if j.error is not None), None) or sqlite3.Error(
                "the transaction was rolled back"
            )
        if lost is None:
            try:
                conn.execute("ROLLBACK" if alone and batch[0].error else "COMMIT")
            except sqlite3.Error as exc:
                lost = exc
        if lost is not None:
            _rollback(conn)
            for job in batch:
                job.error = job.error or lost
                job.result = None
            _reported_after(batch)
        else:
            self.wrote.set()
        for job in batch:
            _done(job)

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> BaseException | None:
        """Run each job (in a savepoint when there are several); the error that lost the
        whole transaction, if one did."""
        failed: dict[str, list[_Job]] = {}
        if len(batch) == 1:
            self._run_write(conn, batch[0], failed)
            return None
        for job in batch:
            try:
                conn.execute("SAVEPOINT job")
            except sqlite3.Error as exc:
                return exc
            self._run_write(conn, job, failed)
            try:
                if job.error is not None:
                    conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            except sqlite3.Error as exc:
                return job.error or exc
        return None

    def _run_write(
        self, conn: sqlite3.Connection, job: _Job, failed: dict[str, list[_Job]]
    ) -> None:
        """Run a write, unless it is `after` a key whose queued write failed, in this
        transaction (`failed`, by key) or an earlier one: it then takes that failure."""
        if job.after is not None:
            earlier = failed.pop(job.after, [])
            for each in earlier:
                each.reported = True
            if earlier:
                job.error = earlier[0].error
            else:
                with self._pending_lock:
                    job.error = self._lost.pop(job.after, None)
        if job.error is None:
            _run(conn, job)
        if job.error is not None and job.key is not None:
            failed.setdefault(job.key, []).append(job)


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _reported_after(batch: list[_Job]) -> None:
    """The whole transaction was lost: a write `after` a key takes the failure of that key's
    writes before it (the one error, reported once)."""
    for i, job in enumerate(batch):
        if job.after is not None:
            for earlier in batch[:i]:
                if earlier.key == job.after:
                    earlier.reported = True


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # nothing more can be undone; the next BEGIN starts clean


def _settle_all(jobs: list[_Job], error: BaseException) -> None:
    for job in jobs:
        job.error = error
    _reported_after(jobs)
    for job in jobs:
        _done(job)


def _done(job: _Job) -> None:
    """Tell the caller; a failing callback must never take the thread down."""
    try:
        job.done(job)
    except Exception:  # pragma: no cover - the callbacks only hand results over
        log.exception("store.callback_failed")


def _run(conn: sqlite3.Connection, job: _Job) -> None:
    try:
        job.result = job.fn(conn)
    except BaseException as exc:
        job.error = exc


def _expire(future: asyncio.Future[Any], timeout: float) -> None:
    if not future.done():
        future.set_exception(WorkerTimeout(f"no answer from the database within {timeout:g} s"))


def _settle_each(settled: list[tuple[asyncio.Future[Any], _Job]]) -> None:
    for future, job in settled:
        _settle(future, job)


def _settle(future: asyncio.Future[Any], job: _Job) -> None:
    if future.done():  # cancelled, or given up on by _expire
        return
    if job.error is not None:
        future.set_exception(job.error)
    else:
        future.set_result(job.result)
