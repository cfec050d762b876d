"""One thread owns the SQLite connection; async callers queue work to it and await the result.

Why not anyio.to_thread: a hop through the shared pool costs more than the write itself, and a
dedicated thread lets writes queued together share one commit (group commit), which is what
keeps persistence cheap when many sessions are talking at once.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import anyio

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

_MAX_BATCH = 256
MAX_PENDING = 1024
"""Queued-and-forgotten writes allowed at once before `submit` makes its caller wait."""


class _Job:
    __slots__ = ("done", "error", "fn", "result", "write")

    def __init__(self, fn: Op, write: bool, done: Callable[[_Job], None]) -> None:
        self.fn = fn
        self.write = write
        self.done = done
        self.result: Any = None
        self.error: BaseException | None = None


class DBWorker:
    """Runs operations on one connection in one thread, in the order they were submitted."""

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], name: str = "rousseau-db"
    ) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        ready: Future[sqlite3.Connection] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(connect, ready), name=name, daemon=True
        )
        self._thread.start()
        self.conn = ready.result()  # re-raises a failure to open
        self._stopped = False
        self._pending = 0
        self._pending_lock = threading.Lock()
        self.on_error: Callable[[BaseException], None] = lambda exc: None

    # -- submitting ------------------------------------------------------------------------

    async def call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = False) -> T:
        """Run `fn(conn)` on the worker and await its result (write: inside a transaction)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: take the portable, slower path
            return await anyio.to_thread.run_sync(lambda: self.call_sync(fn, write=write))
        future: asyncio.Future[Any] = loop.create_future()

        def done(job: _Job) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, job)
            except RuntimeError:  # the loop closed while the job ran: nobody is waiting
                pass

        self._submit(_Job(fn, write, done))
        return await future  # type: ignore[no-any-return]

    async def submit(self, fn: Op) -> None:
        """Queue a write without waiting for it; later work on this worker runs after it.

        A failure is reported to `on_error`. Past MAX_PENDING queued writes, wait for them.
        """

        def done(job: _Job) -> None:
            with self._pending_lock:
                self._pending -= 1
            if job.error is not None:
                self.on_error(job.error)

        with self._pending_lock:
            self._pending += 1
            crowded = self._pending > MAX_PENDING
        self._submit(_Job(fn, True, done))
        if crowded:
            await self.call(_nothing)

    async def flush(self) -> None:
        """Wait until everything queued so far has run."""
        await self.call(_nothing)

    def call_sync(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = False) -> T:
        """Run `fn(conn)` on the worker and block until it is done (for threads and the CLI)."""
        finished = threading.Event()
        job = _Job(fn, write, lambda _: finished.set())
        self._submit(job)
        finished.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def stop(self, final: Op | None = None) -> None:
        """Run `final` (if any) after everything queued, then close the connection."""
        if self._stopped:
            return
        if final is not None:
            self.call_sync(final)
        self._stopped = True
        self._jobs.put(None)
        self._thread.join()

    @property
    def stopped(self) -> bool:
        return self._stopped

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
                job = self._jobs.get()
                if job is None:
                    return
                if not job.write:
                    _run(conn, job)
                    job.done(job)
                    continue
                batch = [job]
                stop = False
                while len(batch) < _MAX_BATCH:
                    try:
                        nxt = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    if not nxt.write:
                        self._commit(conn, batch)
                        _run(conn, nxt)
                        nxt.done(nxt)
                        batch = []
                        continue
                    batch.append(nxt)
                self._commit(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    @staticmethod
    def _commit(conn: sqlite3.Connection, batch: list[_Job]) -> None:
        """Run writes in one transaction, each in a savepoint so one failure spares the rest."""
        if not batch:
            return
        alone = len(batch) == 1
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in batch:
                job.error = exc
                job.done(job)
            return
        for job in batch:
            if alone:
                _run(conn, job)
                break
            conn.execute("SAVEPOINT job")
            _run(conn, job)
            if job.error is not None:
                conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
        try:
            conn.execute("ROLLBACK" if alone and batch[0].error else "COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            for job in batch:
                job.error = job.error or exc
        for job in batch:
            job.done(job)


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _run(conn: sqlite3.Connection, job: _Job) -> None:
    try:
        job.result = job.fn(conn)
    except BaseException as exc:
        job.error = exc


def _settle(future: asyncio.Future[Any], job: _Job) -> None:
    if future.cancelled():
        return
    if job.error is not None:
        future.set_exception(job.error)
    else:
        future.set_result(job.result)
