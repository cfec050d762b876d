"""What several daemons on one PostgreSQL hold on connections of their own: the election of a
transport's poller (an advisory lock that the server frees the moment its holder dies), the
news of work between daemons and the relay of approval answers (LISTEN/NOTIFY)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import structlog

from rousseau.state.postgres import PostgresStore

log = structlog.get_logger("rousseau.state")

ELECTION_POLL = 1.0
"""Seconds between a waiting daemon's tries to become a transport's poller."""


async def own_connection(store: PostgresStore, purpose: str) -> Any:
    """A connection of this daemon's own (autocommit, outside the pool), tried again every
    ELECTION_POLL until the server takes it."""
    import psycopg

    while True:
        try:
            return await psycopg.AsyncConnection.connect(store.url, autocommit=True)
        except psycopg.Error as exc:
            log.warning("cluster.connect_failed", purpose=purpose, error=str(exc))
            await anyio.sleep(ELECTION_POLL)


class SharedClock:
    """The database's clock, carried between readings by this host's monotonic clock. Every
    daemon's beats and leases read it: a host whose own clock was set back (NTP, a VM
    restored) beat in the past, was taken for dead and had its turns adopted while it was
    still answering them."""

    def __init__(self) -> None:
        self._offset = time.time() - time.monotonic()  # this host's, until the first reading

    def __call__(self) -> float:
        return time.monotonic() + self._offset

    async def read(self, db: Any) -> None:
        """Take the database's time now (`db`: a connection in a transaction)."""
        cursor = await db.execute("SELECT extract(epoch FROM clock_timestamp())")
        row = await cursor.fetchone()
        if row is not None:
            self._offset = float(row[0]) - time.monotonic()


class Poller:
    """This daemon's hold on a transport's poller lock."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def lost(self) -> None:
        """Return once the lock's connection stops answering: the lock may be another's."""
        import psycopg

        while True:
            await anyio.sleep(ELECTION_POLL)
            try:
                with anyio.fail_after(ELECTION_POLL * 5):
                    await self._conn.execute("SELECT 1")
            except (psycopg.Error, TimeoutError) as exc:
                log.warning("cluster.poller_lost", error=str(exc) or type(exc).__name__)
                return


WORK_CHANNEL = "rousseau_work"
"""Where daemons tell each other of work: a message handed over, or a reply to send."""
INBOX_NEWS = "inbox"
"""Said when messages wait to be pulled (handed over, or left by a daemon that stopped)."""
OUTBOX_NEWS = "outbox "
"""Followed by a transport's name: a reply of it was queued for the daemon elected for it."""


async def hear_work(
    store: PostgresStore, every: float, work: Callable[[], None], parts: Callable[[str], None]
) -> None:
    """Listen for the news of work on a connection of this daemon's own until cancelled
    (see PostgresDaemonState.listen); `work()` also on every connection (what was said
    while not listening) and every `every` seconds, when the connection is checked too."""
    import psycopg

    while True:
        conn = await own_connection(store, "work")
        try:
            await conn.execute(f"LISTEN {WORK_CHANNEL}")
            while True:
                work()
                async for note in conn.notifies(timeout=every):
                    if note.payload == INBOX_NEWS:
                        work()
                    elif note.payload.startswith(OUTBOX_NEWS):
                        parts(note.payload.removeprefix(OUTBOX_NEWS))
                with anyio.fail_after(every):
                    await conn.execute("SELECT 1")
        except (psycopg.Error, TimeoutError) as exc:
            log.warning("cluster.work_listen_lost", error=str(exc) or type(exc).__name__)
            await anyio.sleep(ELECTION_POLL)
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()


APPROVALS_CHANNEL = "rousseau_approvals"


class PostgresApprovals:
    """The approvals Relay on PostgreSQL: each waiting request is a row; an answer given on
    any daemon is written to it and announced (NOTIFY) to the daemon that asked, which
    listens on a connection of its own (and reads the rows again whenever it reconnects)."""

    def __init__(self, store: PostgresStore, daemon: str) -> None:
        self.store = store
        self.daemon = daemon

    async def publish(self, code: str, owners: frozenset[str]) -> bool:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "INSERT INTO approvals (code, daemon, owners, asked_at) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (code) DO NOTHING",
                (code, self.daemon, json.dumps(sorted(owners)), time.time()),
            )
            return cursor.rowcount > 0

    async def owners_of(self, code: str) -> frozenset[str] | None:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT owners FROM approvals WHERE code = %s AND allow IS NULL", (code,)
            )
            row = await cursor.fetchone()
        return None if row is None else frozenset(json.loads(row[0]))

    async def send_answer(self, code: str, allow: bool, who: str) -> bool:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "UPDATE approvals SET allow = %s, answered_by = %s"
                " WHERE code = %s AND allow IS NULL RETURNING daemon",
                (allow, who, code),
            )
            row = await cursor.fetchone()
            if row is None:
                return False
            message = json.dumps({"daemon": row[0], "code": code, "allow": allow, "who": who})
            await db.execute("SELECT pg_notify(%s, %s)", (APPROVALS_CHANNEL, message))
        return True

    async def withdraw(self, code: str) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "DELETE FROM approvals WHERE code = %s AND daemon = %s", (code, self.daemon)
            )

    async def answers(self) -> AsyncIterator[tuple[str, bool, str]]:
        import psycopg

        while True:
            conn = await own_connection(self.store, "approvals")
            try:
                await conn.execute(f"LISTEN {APPROVALS_CHANNEL}")
                # What was answered while this daemon was not listening.
                cursor = await conn.execute(
                    "SELECT code, allow, answered_by FROM approvals"
                    " WHERE daemon = %s AND allow IS NOT NULL",
                    (self.daemon,),
                )
                for code, allow, who in await cursor.fetchall():
                    yield str(code), bool(allow), str(who)
                async for note in conn.notifies():
                    answer = json.loads(note.payload)
                    if answer.get("daemon") == self.daemon:
                        yield str(answer["code"]), bool(answer["allow"]), str(answer["who"])
            except psycopg.Error as exc:
                log.warning("cluster.approvals_listen_lost", error=str(exc))
                await anyio.sleep(ELECTION_POLL)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close()
