"""The daemon's inbox, outbox and chat map on PostgreSQL, shared by several daemons.

Each daemon registers itself (`daemons`) and beats while it lives. Work is claimed by a
daemon's id: an inbound by the daemon that accepted it (or pulled it, handed over by one with
no free turn slot), outbox parts by the daemon that takes them to send (`FOR UPDATE SKIP
LOCKED`: two daemons never take one part). A daemon whose last beat is older than the lease
is dead: what it claimed and did not finish is taken over by whichever daemon asks next. Beats
are read by the database's clock, several within a lease: a live daemon's claims are kept.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from typing import Any

import anyio
import structlog

from rousseau.agent import Attachment, Content, StoreError
from rousseau.messages import DEFAULT_AGENT, Inbound, Outbound
from rousseau.state.postgres import PostgresStore
from rousseau.state.postgres_cluster import (
    ELECTION_POLL,
    INBOX_NEWS,
    OUTBOX_NEWS,
    WORK_CHANNEL,
    Poller,
    PostgresApprovals,
    SharedClock,
    hear_work,
    own_connection,
)
from rousseau.state.records import (
    CODE_COLUMNS,
    MAX_PENDING_CODES,
    OUTBOX_COLUMNS,
    REJECTED_FOR,
    REJECTED_KEY,
    SWEEP_BATCH,
    OutboxRow,
    PairingCode,
    PairingGrant,
    Progress,
    Retention,
    files_json,
    files_of,
    outbox_params,
    outbox_row,
    pairing_code_of,
    sent_files,
)

log = structlog.get_logger("rousseau.state")

CLAIM_POLL = 0.1
"""Seconds between tries to claim a session another daemon is answering in."""
LEASE = 30.0
"""Seconds after its last beat that a daemon counts as dead and its claims are taken over."""

_LIVE = "(SELECT id FROM daemons WHERE beat_at >= %(stale)s)"
"""The daemons that beat within the lease: a claim held by any other (dead, or gone after a
clean stop) may be taken over."""
_FREE = f"(claimed_by IS NULL OR claimed_by NOT IN {_LIVE})"
"""An inbox row no live daemon holds: handed over, or left by a daemon that died or left."""

_INBOUND = (
    "transport, chat_id, sender_id, message_id, text, is_group, mentioned, thread_id, at,"
    " attachments, refusal"
)


def _inbound(r: tuple[object, ...]) -> Inbound:
    return Inbound(
        transport=str(r[0]),
        chat_id=str(r[1]),
        sender_id=str(r[2]),
        message_id=str(r[3]),
        text=str(r[4]),
        is_group=bool(r[5]),
        mentioned=bool(r[6]),
        thread_id=None if r[7] is None else str(r[7]),
        at=float(r[8]),  # type: ignore[arg-type]
        attachments=files_of(r[9]),  # type: ignore[arg-type]
        refusal=str(r[10]),
    )


class PostgresDaemonState:
    """DaemonState's inbox, outbox and chat map on a PostgresStore, claimed per daemon."""

    def __init__(
        self,
        store: PostgresStore,
        *,
        lease: float = LEASE,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.clock = clock or SharedClock()
        """The clock of beats and leases: the database's (a test's, which it advances)."""
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        """This daemon, as its claims name it."""
        self.stays: frozenset[str] = frozenset()
        """Transports whose replies this daemon sends itself, claimed as queued (a web page)."""
        self.elected: frozenset[str] = frozenset()
        """One-daemon transports: a reply for one that another daemon runs is announced to it."""
        self.config = ""
        """The digest of the config this daemon runs (told with each beat, for status)."""
        self._polled: set[str] = set()  # the transports this daemon is elected for, now

    def _stale(self) -> float:
        return self.clock() - self.lease

    async def beat(self) -> None:
        """Say this daemon lives (call it well within every lease: a third of it)."""
        async with self.store.transaction() as db:
            if isinstance(self.clock, SharedClock):
                await self.clock.read(db)
            now = self.clock()
            await db.execute(
                "INSERT INTO daemons (id, host, pid, started_at, beat_at, config)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET beat_at = %s, config = %s",
                (
                    self.id,
                    socket.gethostname(),
                    os.getpid(),
                    now,
                    now,
                    self.config,
                    now,
                    self.config,
                ),
            )

    async def leave(self) -> None:
        """A clean stop: this daemon's unfinished claims are free at once, not after the
        lease."""
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET claimed_by = NULL WHERE claimed_by = %s AND status = 'pending'",
                (self.id,),
            )
            await db.execute(
                "UPDATE outbox SET claimed_by = NULL WHERE claimed_by = %s AND status = 'pending'",
                (self.id,),
            )
            await db.execute("DELETE FROM daemons WHERE id = %s", (self.id,))
            await db.execute("SELECT pg_notify(%s, %s)", (WORK_CHANNEL, INBOX_NEWS))

    async def beating(self) -> None:
        """Beat every third of the lease until cancelled (a failed beat is tried again)."""
        while True:
            await anyio.sleep(self.lease / 3)
            try:
                await self.beat()
            except StoreError as exc:
                log.warning("cluster.beat_failed", error=str(exc))

    def approvals(self) -> PostgresApprovals:
        """The relay by which this daemon's tool approvals are answered on any daemon."""
        return PostgresApprovals(self.store, self.id)

    async def daemons(self) -> list[tuple[str, float, str]]:
        """The daemons that beat within the lease: each with its last beat and the digest of
        the config it runs."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT id, beat_at, config FROM daemons WHERE beat_at >= %s ORDER BY id",
                (self._stale(),),
            )
            return [(str(r[0]), float(r[1]), str(r[2])) for r in await cursor.fetchall()]

    @asynccontextmanager
    async def polling(self, transport: str) -> AsyncIterator[Poller]:
        """Wait until this daemon is the one that polls `transport` (elected by an advisory
        lock on a connection of its own, which the server frees the moment this daemon dies
        or the connection breaks); hold it until leaving."""
        key = "poller:" + transport
        while True:
            conn = await own_connection(self.store, key)
            try:
                # Polled: the holder is another process, which has no way to wake this one.
                while not await _try_lock(conn, key):  # noqa: ASYNC110
                    await anyio.sleep(ELECTION_POLL)
                break
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await conn.close()
                raise
        try:
            async with self.store.transaction() as db:
                await db.execute(
                    "INSERT INTO pollers (transport, daemon, since) VALUES (%s, %s, %s)"
                    " ON CONFLICT (transport) DO UPDATE SET daemon = excluded.daemon,"
                    " since = excluded.since",
                    (transport, self.id, time.time()),
                )
            log.info("cluster.polling", transport=transport, daemon=self.id)
            self._polled.add(transport)
            yield Poller(conn)
        finally:
            self._polled.discard(transport)
            with anyio.CancelScope(shield=True):
                await conn.close()  # and with it the lock

    async def pollers(self) -> dict[str, str]:
        """Which daemon polls each single-poller transport (the last one elected)."""
        async with self.store.transaction() as db:
            cursor = await db.execute("SELECT transport, daemon FROM pollers")
            return {str(t): str(d) for t, d in await cursor.fetchall()}

    @asynccontextmanager
    async def session_claimed(self, session_key: str) -> AsyncIterator[None]:
        """Hold a session for one turn: no other daemon runs a turn of it meanwhile. Waits
        while a live daemon holds it; a dead one's hold is taken over."""
        # Polled: the holder is another process, which has no way to wake this one.
        while not await self._claim_session(session_key):  # noqa: ASYNC110
            await anyio.sleep(CLAIM_POLL)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                async with self.store.transaction() as db:
                    await db.execute(
                        "DELETE FROM session_claims WHERE session_key = %s AND daemon = %s",
                        (session_key, self.id),
                    )

    async def _claim_session(self, session_key: str) -> bool:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"INSERT INTO session_claims (session_key, daemon, since)"
                f" VALUES (%(key)s, %(me)s, %(now)s) ON CONFLICT (session_key) DO UPDATE"
                f" SET daemon = excluded.daemon, since = excluded.since"
                f" WHERE session_claims.daemon NOT IN {_LIVE}"
                f" RETURNING daemon",
                {"key": session_key, "me": self.id, "now": self.clock(), "stale": self._stale()},
            )
            return await cursor.fetchone() is not None

    # -- inbox -----------------------------------------------------------------------------

    async def accept(self, inbound: Inbound, *, ignored: bool = False) -> bool:
        """Record an inbound, claimed by this daemon; False if it was seen before (by any
        daemon)."""
        async with self.store.transaction() as db:
            if not ignored:  # its time is taken, and made visible, in its chat's order
                await _chat_locked(db, inbound)
            cursor = await db.execute(
                "INSERT INTO inbox (transport, message_id, chat_id, sender_id, thread_id, text,"
                " is_group, mentioned, at, status, received_at, attachments, refusal, claimed_by)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (transport, message_id) DO NOTHING",
                (
                    inbound.transport,
                    inbound.message_id,
                    inbound.chat_id,
                    inbound.sender_id,
                    inbound.thread_id,
                    inbound.text,
                    inbound.is_group,
                    inbound.mentioned,
                    inbound.at,
                    "ignored" if ignored else "pending",
                    self.clock(),  # one clock for every daemon: the order of arrival
                    files_json(inbound.attachments),
                    inbound.refusal,
                    None if ignored else self.id,
                ),
            )
            return cursor.rowcount > 0

    async def mark_appended(self, inbound: Inbound, session_id: str) -> None:
        """Remember the row of the user message just appended (see DaemonState)."""
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET appended = coalesce((SELECT max(id) FROM messages"
                " WHERE session_id = %s), 1) WHERE transport = %s AND message_id = %s",
                (session_id, inbound.transport, inbound.message_id),
            )

    async def progress(self, inbound: Inbound, session_id: str) -> Progress:
        """Where an inbound's turn got to before a stop or a failure, in one read."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT appended, files_out, preview FROM inbox"
                " WHERE transport = %s AND message_id = %s",
                (inbound.transport, inbound.message_id),
            )
            row = await cursor.fetchone()
            if not row:
                return Progress()
            preview = [str(i) for i in json.loads(row[2] or "[]")]
            if not row[0]:
                return Progress(preview=preview)
            cursor = await db.execute(
                "SELECT role, content, text FROM messages WHERE session_id = %s AND id > %s"
                " ORDER BY id DESC LIMIT 1",
                (session_id, row[0]),
            )
            last = await cursor.fetchone()
        if last is None or last[0] != "assistant":
            return Progress(appended=True, preview=preview)
        if "tool_use" in {part.get("type") for part in json.loads(last[1])}:
            return Progress(appended=True, preview=preview)
        files = sent_files(json.dumps(row[1]) if row[1] is not None else None)
        return Progress(appended=True, done=str(last[2]), files=files, preview=preview)

    async def shown_preview(self, inbound: Inbound, ids: list[str]) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET preview = %s WHERE transport = %s AND message_id = %s",
                (json.dumps(ids), inbound.transport, inbound.message_id),
            )

    async def sent_file(self, inbound: Inbound, attachment: Attachment, caption: str) -> None:
        entry = {"file": Content.of_attachment(attachment).to_dict(), "caption": caption}
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET files_out = coalesce(files_out, '[]'::jsonb)"
                " || jsonb_build_array(%s::jsonb) WHERE transport = %s AND message_id = %s",
                (json.dumps(entry), inbound.transport, inbound.message_id),
            )

    async def forget_sent_files(self, inbound: Inbound) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET files_out = NULL WHERE transport = %s AND message_id = %s"
                " AND files_out IS NOT NULL",
                (inbound.transport, inbound.message_id),
            )

    async def pending(self) -> list[Inbound]:
        """Inbound messages accepted but not yet answered, oldest first: this daemon's own,
        unclaimed ones, and those of dead daemons, which are claimed for this one here."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"UPDATE inbox SET claimed_by = %(me)s WHERE (transport, message_id) IN"
                f" (SELECT transport, message_id FROM inbox WHERE status = 'pending'"
                f" AND (claimed_by = %(me)s OR {_FREE}) FOR UPDATE SKIP LOCKED)"
                f" RETURNING {_INBOUND}, received_at",
                {"me": self.id, "stale": self._stale()},
            )
            rows = await cursor.fetchall()
        rows.sort(key=lambda r: r[-1])
        return [_inbound(r) for r in rows]

    async def hand_over(self, inbound: Inbound) -> None:
        """Leave a message this daemon accepted for any daemon to answer (this one has no
        free turn slot): its claim is dropped, and the daemons are told work waits."""
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE inbox SET claimed_by = NULL WHERE transport = %s AND message_id = %s"
                " AND claimed_by = %s AND status = 'pending'",
                (inbound.transport, inbound.message_id, self.id),
            )
            await db.execute("SELECT pg_notify(%s, %s)", (WORK_CHANNEL, INBOX_NEWS))

    async def pull(self, chats: int) -> list[Inbound]:
        """The waiting messages of up to `chats` chats no other live daemon works on, the
        chat waiting longest first, claimed for this daemon, oldest first: those handed
        over, and those a dead daemon (or one that left) did not answer."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"WITH chats AS MATERIALIZED (SELECT transport, chat_id, thread FROM"
                f" (SELECT transport, chat_id, coalesce(thread_id, '') AS thread,"
                f" min(received_at) AS first FROM inbox WHERE status = 'pending'"
                f" GROUP BY 1, 2, 3 HAVING count(*) FILTER (WHERE {_FREE}) > 0"
                f" AND count(*) FILTER (WHERE claimed_by != %(me)s"
                f" AND claimed_by IN {_LIVE}) = 0 ORDER BY first OFFSET 0) waiting"
                # One daemon takes a chat at a time, and none while a message of it is being
                # taken in or its earlier messages looked for (see _chat_locked). The lock
                # is tried chat by chat in order until enough are taken (OFFSET 0 keeps the
                # planner from trying it on every chat, below the sort).
                f" WHERE pg_try_advisory_xact_lock(hashtextextended("
                f"transport || ':' || chat_id || ':' || thread, 0)) LIMIT %(chats)s)"
                f" UPDATE inbox SET claimed_by = %(me)s WHERE (transport, message_id) IN"
                f" (SELECT i.transport, i.message_id FROM inbox i JOIN chats c"
                f" ON c.transport = i.transport AND c.chat_id = i.chat_id"
                f" AND c.thread = coalesce(i.thread_id, '')"
                f" WHERE i.status = 'pending' AND {_FREE} FOR UPDATE OF i SKIP LOCKED)"
                f" RETURNING {_INBOUND}, received_at",
                {"me": self.id, "stale": self._stale(), "chats": chats},
            )
            rows = await cursor.fetchall()
        rows.sort(key=lambda r: r[-1])
        return [_inbound(r) for r in rows]

    async def listen(self, work: Callable[[], None], parts: Callable[[str], None]) -> None:
        """Until cancelled: `work()` when messages may wait to be pulled (another daemon
        handed one over or left; on every connection; every third of the lease, for a
        dead daemon's), `parts(transport)` when another daemon queued a reply of a
        transport this one may be elected for."""
        await hear_work(self.store, self.lease / 3, work, parts)

    async def earlier(self, inbound: Inbound) -> list[Inbound]:
        """Called holding `inbound`'s session: the messages of its chat accepted before it
        and still unanswered, whichever daemon took them in, oldest first; claimed here, to
        be answered first. No other daemon can be answering one of them (it would hold the
        session); one that took one in skips it later (see `unanswered`)."""
        async with self.store.transaction() as db:
            # A message of the chat another daemon is taking in right now is committed first.
            await _chat_locked(db, inbound)
            cursor = await db.execute(
                f"UPDATE inbox SET claimed_by = %(me)s WHERE (transport, message_id) IN"
                f" (SELECT transport, message_id FROM inbox WHERE status = 'pending'"
                f" AND transport = %(transport)s AND chat_id = %(chat)s"
                f" AND coalesce(thread_id, '') = %(thread)s AND received_at < (SELECT"
                f" received_at FROM inbox WHERE transport = %(transport)s"
                f" AND message_id = %(message)s) FOR UPDATE)"
                f" RETURNING {_INBOUND}, received_at",
                {
                    "me": self.id,
                    "transport": inbound.transport,
                    "chat": inbound.chat_id,
                    "thread": inbound.thread_id or "",
                    "message": inbound.message_id,
                },
            )
            rows = await cursor.fetchall()
        rows.sort(key=lambda r: r[-1])
        return [_inbound(r) for r in rows]

    async def unanswered(self, inbound: Inbound) -> bool:
        """Called holding its session: whether `inbound` still waits for its answer (another
        daemon may have answered it first, as one of its chat's earlier messages)."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT 1 FROM inbox WHERE transport = %s AND message_id = %s"
                " AND status = 'pending'",
                (inbound.transport, inbound.message_id),
            )
            return await cursor.fetchone() is not None

    async def finish(
        self,
        inbound: Inbound | None,
        parts: list[Outbound],
        *,
        error: str | None = None,
        history: str | None = None,
    ) -> None:
        """In one transaction: queue the reply parts and mark the inbound done (or failed).
        `history` asks nothing more here: the history's writes were each awaited. A part
        of a transport another daemon is elected for is announced to that daemon."""
        now = time.time()
        far = {p.transport for p in parts} & (self.elected - self._polled)
        async with self.store.transaction() as db:
            async with db.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO outbox (transport, chat_id, thread_id, reply_to, text, status,"
                    " next_attempt_at, created_at, buttons, attachment, replaces, claimed_by)"
                    " VALUES (%s, %s, %s, %s, %s, 'pending', %s, %s, %s, %s, %s, %s)",
                    [
                        (*outbox_params(p, now), self.id if p.transport in self.stays else None)
                        for p in parts
                    ],
                )
            for name in sorted(far):
                await db.execute("SELECT pg_notify(%s, %s)", (WORK_CHANNEL, OUTBOX_NEWS + name))
            if inbound is not None:
                await db.execute(
                    "UPDATE inbox SET status = %s, error = %s, claimed_by = NULL"
                    " WHERE transport = %s AND message_id = %s",
                    (
                        "done" if error is None else "failed",
                        error,
                        inbound.transport,
                        inbound.message_id,
                    ),
                )

    # -- outbox ----------------------------------------------------------------------------

    async def due(
        self, transport: str, limit: int = 50, *, skip: Collection[str] = ()
    ) -> list[OutboxRow]:
        """Parts ready to send, oldest first, none of the chats in `skip`; each is claimed
        for this daemon, so no other daemon sends it while this one lives."""
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"UPDATE outbox SET claimed_by = %(me)s WHERE id IN (SELECT id FROM outbox o"
                f" WHERE status = 'pending' AND transport = %(transport)s"
                f" AND next_attempt_at <= %(now)s AND NOT (chat_id = ANY(%(skip)s))"
                f" AND (claimed_by IS NULL OR claimed_by = %(me)s"
                f" OR claimed_by NOT IN {_LIVE})"
                # A part never overtakes an earlier one of its chat that waits for a retry,
                # or that another daemon is sending.
                f" AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending'"
                f" AND e.transport = o.transport AND e.chat_id = o.chat_id AND e.id < o.id"
                f" AND (e.next_attempt_at > %(now)s OR e.claimed_by != %(me)s))"
                # Nor does one daemon take a chat's parts while another is taking some (its
                # rows locked and skipped here, not yet marked as its own): both would go
                # out at once and could arrive swapped.
                f" AND pg_try_advisory_xact_lock(hashtextextended("
                f"'outbox:' || o.transport || ':' || o.chat_id, 0))"
                f" ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
                f" RETURNING {OUTBOX_COLUMNS}",
                {
                    "me": self.id,
                    "stale": self._stale(),
                    "transport": transport,
                    "now": time.time(),
                    "skip": list(skip),
                    "limit": limit,
                },
            )
            rows = await cursor.fetchall()
        rows.sort(key=lambda r: r[0])
        return [outbox_row(r) for r in rows]

    async def waiting(
        self, transport: str, *, skip: Collection[str] = ()
    ) -> tuple[int, float | None]:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"SELECT count(*), min(next_attempt_at) FILTER (WHERE"
                f" NOT (chat_id = ANY(%(skip)s))"
                # Nor a part another live daemon is sending, or that waits behind one.
                f" AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending'"
                f" AND e.transport = o.transport AND e.chat_id = o.chat_id AND e.id <= o.id"
                f" AND e.claimed_by != %(me)s AND e.claimed_by IN {_LIVE})"
                # A chat's later parts go when its first does (see due): its time is theirs.
                f" AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending'"
                f" AND e.transport = o.transport AND e.chat_id = o.chat_id AND e.id < o.id))"
                f" FROM outbox o WHERE status = 'pending' AND transport = %(transport)s",
                {
                    "skip": list(skip),
                    "me": self.id,
                    "stale": self._stale(),
                    "transport": transport,
                },
            )
            row = await cursor.fetchone()
        if row is None:
            return 0, None
        return int(row[0]), None if row[1] is None else float(row[1])

    async def sent(self, row_id: int) -> None:
        """Record a part as sent, at once (see PostgresStore.urgent)."""
        async with self.store.urgent() as db:
            await db.execute(
                "UPDATE outbox SET status = 'sent', sent_at = %s, attempts = attempts + 1"
                " WHERE id = %s",
                (time.time(), row_id),
            )

    async def retry_later(self, row_id: int, delay: float, error: str, *, give_up: bool) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = %s,"
                " last_error = %s, status = %s WHERE id = %s",
                (time.time() + delay, error[:500], "failed" if give_up else "pending", row_id),
            )

    async def outbox_pending(self, transports: Collection[str] | None = None) -> int:
        where = "" if transports is None else " AND transport = ANY(%s)"
        args = () if transports is None else (list(transports),)
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"SELECT count(*) FROM outbox WHERE status = 'pending'{where}", args
            )
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    # -- chats and sessions ----------------------------------------------------------------

    async def session_for(self, session_key: str) -> str | None:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT session_id FROM chat_sessions WHERE session_key = %s", (session_key,)
            )
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    async def bind_session(
        self,
        session_key: str,
        session_id: str,
        *,
        owner: str | None = None,
        chat: str | None = None,
        agent: str = DEFAULT_AGENT,
    ) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "INSERT INTO chat_sessions (session_key, session_id, updated_at)"
                " VALUES (%s, %s, %s) ON CONFLICT (session_key) DO UPDATE SET"
                " session_id = excluded.session_id, updated_at = excluded.updated_at",
                (session_key, session_id, time.time()),
            )
            await db.execute(
                "UPDATE sessions SET owner = coalesce(owner, %s), chat = coalesce(chat, %s),"
                " agent = %s WHERE id = %s",
                (owner, chat, agent, session_id),
            )

    # -- pairing ---------------------------------------------------------------------------

    async def is_allowed(self, transport: str, sender_id: str) -> bool:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT 1 FROM allowed_senders WHERE transport = %s AND sender_id = %s",
                (transport, sender_id),
            )
            return await cursor.fetchone() is not None

    async def pairing_code(
        self, transport: str, sender_id: str, chat_id: str, new_code: str, ttl: float
    ) -> PairingGrant | None:
        """As DaemonState.pairing_code: one live code per sender, none for a sender lately
        rejected, the transport's oldest evicted past MAX_PENDING_CODES."""
        now = time.time()
        async with self.store.transaction() as db:
            # One transport's codes are given one at a time, whichever daemon gives them.
            await db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("pair:" + transport,))
            await db.execute("DELETE FROM pairing_codes WHERE expires_at <= %s", (now,))
            await db.execute(
                "DELETE FROM transport_state WHERE key LIKE %s AND value::float8 <= %s",
                (REJECTED_KEY + "%", now),
            )
            cursor = await db.execute(
                "SELECT 1 FROM transport_state WHERE transport = %s AND key = %s",
                (transport, REJECTED_KEY + sender_id),
            )
            if await cursor.fetchone():
                return None
            cursor = await db.execute(
                "SELECT code FROM pairing_codes WHERE transport = %s AND sender_id = %s",
                (transport, sender_id),
            )
            row = await cursor.fetchone()
            if row is not None:
                return PairingGrant(code=str(row[0]), new=False)
            evicted = None
            cursor = await db.execute(
                f"SELECT {CODE_COLUMNS} FROM pairing_codes WHERE transport = %s"
                " ORDER BY created_at, seq",
                (transport,),
            )
            codes = await cursor.fetchall()
            if len(codes) >= MAX_PENDING_CODES:
                evicted = pairing_code_of(codes[0])
                await db.execute("DELETE FROM pairing_codes WHERE code = %s", (evicted.code,))
            await db.execute(
                "INSERT INTO pairing_codes (code, transport, sender_id, chat_id, created_at,"
                " expires_at) VALUES (%s, %s, %s, %s, %s, %s)",
                (new_code, transport, sender_id, chat_id, now, now + ttl),
            )
        return PairingGrant(code=new_code, new=True, evicted=evicted)

    async def pairing_codes(self) -> list[PairingCode]:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                f"SELECT {CODE_COLUMNS} FROM pairing_codes WHERE expires_at > %s"
                " ORDER BY created_at, seq",
                (time.time(),),
            )
            rows = await cursor.fetchall()
        return [pairing_code_of(r) for r in rows]

    async def approve(self, code: str) -> PairingCode | None:
        """Admit the sender behind a live code; None if no such code (or it expired)."""
        async with self.store.transaction() as db:
            found = await self._take_code(db, code)
            if found is not None:
                await db.execute(
                    "INSERT INTO allowed_senders (transport, sender_id, approved_at)"
                    " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    (found.transport, found.sender_id, time.time()),
                )
                await db.execute(
                    "DELETE FROM transport_state WHERE transport = %s AND key = %s",
                    (found.transport, REJECTED_KEY + found.sender_id),
                )
        return found

    async def reject(self, code: str, *, for_seconds: float = REJECTED_FOR) -> PairingCode | None:
        """Drop a live code; its sender gets no new one for `for_seconds`."""
        async with self.store.transaction() as db:
            found = await self._take_code(db, code)
            if found is not None:
                await db.execute(
                    "INSERT INTO transport_state (transport, key, value) VALUES (%s, %s, %s)"
                    " ON CONFLICT (transport, key) DO UPDATE SET value = excluded.value",
                    (
                        found.transport,
                        REJECTED_KEY + found.sender_id,
                        str(time.time() + for_seconds),
                    ),
                )
        return found

    @staticmethod
    async def _take_code(db: Any, code: str) -> PairingCode | None:
        cursor = await db.execute(
            "DELETE FROM pairing_codes WHERE code = %s AND expires_at > %s"
            f" RETURNING {CODE_COLUMNS}",
            (code.strip().upper(), time.time()),
        )
        r = await cursor.fetchone()
        return None if r is None else pairing_code_of(r)

    # -- retention and media ---------------------------------------------------------------

    async def sweep(self, ages: Retention, now: float | None = None) -> dict[str, int]:
        """As DaemonState.sweep: finished rows older than their age; never pending work."""
        at = time.time() if now is None else now
        deleted: dict[str, int] = {"compacted": 0}
        async with self.store.transaction() as db:
            if ages.compacted is not None:
                cursor = await db.execute(
                    "DELETE FROM messages WHERE id IN (SELECT id FROM messages"
                    " WHERE compacted AND created_at < %s LIMIT %s)",
                    (at - ages.compacted, SWEEP_BATCH),
                )
                deleted["compacted"] = cursor.rowcount
            for name, query, age in (
                (
                    "inbox",
                    "DELETE FROM inbox WHERE received_at < %s AND status != 'pending'",
                    ages.inbox,
                ),
                (
                    "outbox",
                    "DELETE FROM outbox WHERE created_at < %s AND status != 'pending'",
                    ages.outbox,
                ),
                ("audit", "DELETE FROM tool_calls WHERE started_at < %s", ages.audit),
                (
                    "cron_runs",
                    "DELETE FROM cron_runs WHERE scheduled_at < %s AND status != 'running'",
                    ages.cron_runs,
                ),
            ):
                cursor = await db.execute(query, (at - age,))
                deleted[name] = cursor.rowcount
        return deleted

    async def media_in_use(self) -> set[str]:
        """The sha256 of every file still referred to (see DaemonState.media_in_use)."""
        found: set[str] = set()
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT content FROM messages WHERE strpos(content, '\"sha256\"') > 0"
            )
            for (content,) in await cursor.fetchall():
                found.update(
                    str(block["sha256"])
                    for block in json.loads(content)
                    if isinstance(block, dict) and "sha256" in block
                )
            cursor = await db.execute(
                "SELECT attachments FROM inbox WHERE attachments IS NOT NULL"
                " AND status = 'pending' UNION ALL SELECT attachment FROM outbox"
                " WHERE attachment IS NOT NULL AND status = 'pending'"
            )
            for (stored,) in await cursor.fetchall():
                found.update(a.sha256 for a in files_of(stored))
            cursor = await db.execute(
                "SELECT files_out FROM inbox WHERE files_out IS NOT NULL AND status = 'pending'"
            )
            for (stored,) in await cursor.fetchall():
                found.update(a.sha256 for a, _ in sent_files(json.dumps(stored)))
        return found


async def _try_lock(conn: Any, key: str) -> bool:
    cursor = await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
    row = await cursor.fetchone()
    return bool(row and row[0])


async def _chat_locked(db: Any, inbound: Inbound) -> None:
    """Hold the chat's lock for the rest of the transaction. Taking a message in holds it
    from reading the clock to committing, and `earlier` holds it while it looks: a message
    that reached another daemon first (an earlier time) is never committed after a later
    one's turn looked for the chat's earlier messages and missed it."""
    key = f"{inbound.transport}:{inbound.chat_id}:{inbound.thread_id or ''}"
    await db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
