"""The daemon's durable state beside the sessions: inbox, outbox, chat map and pairing.

It shares the Store's connection and worker, so its writes are ordered with the messages the
agent appends: an inbound marked done implies its session's messages are committed too.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Collection

from rousseau.agent import Attachment, Content
from rousseau.messages import DEFAULT_AGENT, Inbound, Outbound
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
from rousseau.state.store import Store


class DaemonState:
    """Durable inbox/outbox bookkeeping on top of a Store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- inbox ----------------------------------------------------------------------------

    async def accept(self, inbound: Inbound, *, ignored: bool = False) -> bool:
        """Record an inbound (committed before returning); False if it was seen before."""
        status = "ignored" if ignored else "pending"

        def op(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "INSERT OR IGNORE INTO inbox (transport, message_id, chat_id, sender_id,"
                " thread_id, text, is_group, mentioned, at, status, received_at, attachments,"
                " refusal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    inbound.transport,
                    inbound.message_id,
                    inbound.chat_id,
                    inbound.sender_id,
                    inbound.thread_id,
                    inbound.text,
                    int(inbound.is_group),
                    int(inbound.mentioned),
                    inbound.at,
                    status,
                    time.time(),
                    files_json(inbound.attachments),
                    inbound.refusal,
                ),
            )
            return cur.rowcount > 0

        return await self.store.call(op, write=True)

    async def mark_appended(self, inbound: Inbound, session_id: str) -> None:
        """Queued right after the user message's append: remembers that message's row, so a
        replay neither appends it twice nor runs a turn that already finished. Not made if
        that append failed: a retry appends the message again."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE inbox SET appended = coalesce((SELECT max(id) FROM messages"
                " WHERE session_id = ?), 1) WHERE transport = ? AND message_id = ?",
                (session_id, inbound.transport, inbound.message_id),
            )

        await self.store.submit(op, key=session_id, after=session_id)

    async def progress(self, inbound: Inbound, session_id: str) -> Progress:
        """Where an inbound's turn got to before a stop or a failure, in one read."""

        def op(db: sqlite3.Connection) -> Progress:
            row = db.execute(
                "SELECT appended, files_out, preview FROM inbox"
                " WHERE transport = ? AND message_id = ?",
                (inbound.transport, inbound.message_id),
            ).fetchone()
            if not row:
                return Progress()
            preview = [str(i) for i in json.loads(row[2] or "[]")]
            if not row[0]:
                return Progress(preview=preview)
            last = db.execute(
                "SELECT role, content, text FROM messages WHERE session_id = ? AND id > ?"
                " ORDER BY id DESC LIMIT 1",
                (session_id, row[0]),
            ).fetchone()
            if last is None or last[0] != "assistant":
                return Progress(appended=True, preview=preview)
            if "tool_use" in {part.get("type") for part in json.loads(last[1])}:
                return Progress(appended=True, preview=preview)
            return Progress(
                appended=True, done=str(last[2]), files=sent_files(row[1]), preview=preview
            )

        return await self.store.call(op)

    async def shown_preview(self, inbound: Inbound, ids: list[str]) -> None:
        """Keep the messages a streamed reply is shown in, for its final edit."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE inbox SET preview = ? WHERE transport = ? AND message_id = ?",
                (json.dumps(ids), inbound.transport, inbound.message_id),
            )

        await self.store.call(op, write=True)

    async def sent_file(self, inbound: Inbound, attachment: Attachment, caption: str) -> None:
        """Keep a file the inbound's turn sent with the inbound, so that a turn finished
        but not yet queued when the daemon stopped is answered with its files after all."""
        entry = {"file": Content.of_attachment(attachment).to_dict(), "caption": caption}

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE inbox SET files_out = json_insert(coalesce(files_out, '[]'), '$[#]',"
                " json(?)) WHERE transport = ? AND message_id = ?",
                (json.dumps(entry), inbound.transport, inbound.message_id),
            )

        await self.store.call(op, write=True)

    async def forget_sent_files(self, inbound: Inbound) -> None:
        """Before a turn runs again: the files an earlier, unfinished try sent are not its."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE inbox SET files_out = NULL WHERE transport = ? AND message_id = ?"
                " AND files_out IS NOT NULL",
                (inbound.transport, inbound.message_id),
            )

        await self.store.call(op, write=True)

    async def pending(self) -> list[Inbound]:
        """Inbound messages accepted but not yet answered, oldest first (crash recovery)."""

        def op(db: sqlite3.Connection) -> list[Inbound]:
            rows = db.execute(
                "SELECT transport, chat_id, sender_id, message_id, text, is_group, mentioned,"
                " thread_id, at, attachments, refusal FROM inbox WHERE status = 'pending'"
                " ORDER BY received_at"
            ).fetchall()
            return [
                Inbound(
                    transport=r[0],
                    chat_id=r[1],
                    sender_id=r[2],
                    message_id=r[3],
                    text=r[4],
                    is_group=bool(r[5]),
                    mentioned=bool(r[6]),
                    thread_id=r[7],
                    at=r[8],
                    attachments=files_of(r[9]),
                    refusal=r[10],
                )
                for r in rows
            ]

        return await self.store.call(op)

    async def finish(
        self,
        inbound: Inbound | None,
        parts: list[Outbound],
        *,
        error: str | None = None,
        history: str | None = None,
    ) -> None:
        """In one transaction: queue the reply parts and mark the inbound done (or failed,
        with its `error`, when it could not be answered). With the `history` of the turn (its
        session id), that history's queued writes are made first: if one failed, nothing is
        finished and its error is raised."""
        now = time.time()
        status = "done" if error is None else "failed"

        def op(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT INTO outbox (transport, chat_id, thread_id, reply_to, text, status,"
                " next_attempt_at, created_at, buttons, attachment, replaces)"
                " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
                [outbox_params(p, now) for p in parts],
            )
            if inbound is not None:
                db.execute(
                    "UPDATE inbox SET status = ?, error = ? WHERE transport = ? AND message_id = ?",
                    (status, error, inbound.transport, inbound.message_id),
                )

        await self.store.call(op, write=True, after=history)

    # -- outbox ---------------------------------------------------------------------------

    async def due(
        self, transport: str, limit: int = 50, *, skip: Collection[str] = ()
    ) -> list[OutboxRow]:
        """Parts ready to send, oldest first, none of the chats in `skip` (busy sending)."""
        busy = json.dumps(list(skip))

        def op(db: sqlite3.Connection) -> list[OutboxRow]:
            rows = db.execute(
                f"SELECT {OUTBOX_COLUMNS} FROM outbox o"
                " WHERE status = 'pending' AND transport = ?1 AND next_attempt_at <= ?2"
                " AND chat_id NOT IN (SELECT value FROM json_each(?4))"
                # A part never overtakes an earlier one of its chat that waits for a retry.
                " AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending'"
                " AND e.transport = o.transport AND e.chat_id = o.chat_id AND e.id < o.id"
                " AND e.next_attempt_at > ?2)"
                " ORDER BY id LIMIT ?3",
                (transport, time.time(), limit, busy),
            ).fetchall()
            return [outbox_row(r) for r in rows]

        return await self.store.call(op)

    async def waiting(
        self, transport: str, *, skip: Collection[str] = ()
    ) -> tuple[int, float | None]:
        busy = json.dumps(list(skip))

        def op(db: sqlite3.Connection) -> tuple[int, float | None]:
            count, soonest = db.execute(
                "SELECT count(*), min(CASE WHEN chat_id NOT IN"
                " (SELECT value FROM json_each(?2))"
                # A chat's later parts go when its first does (see due): its time is theirs.
                " AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending'"
                " AND e.transport = o.transport AND e.chat_id = o.chat_id AND e.id < o.id)"
                " THEN next_attempt_at END)"
                " FROM outbox o WHERE status = 'pending' AND transport = ?1",
                (transport, busy),
            ).fetchone()
            return int(count), None if soonest is None else float(soonest)

        return await self.store.call(op)

    async def sent(self, row_id: int) -> None:
        """Record a part as sent, ahead of other queued writes: until this commits, a crash
        would send it again (no platform lets a send be made idempotent)."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE outbox SET status = 'sent', sent_at = ?, attempts = attempts + 1"
                " WHERE id = ?",
                (time.time(), row_id),
            )

        await self.store.call(op, write=True, urgent=True)

    async def retry_later(self, row_id: int, delay: float, error: str, *, give_up: bool) -> None:
        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?,"
                " last_error = ?, status = ? WHERE id = ?",
                (time.time() + delay, error[:500], "failed" if give_up else "pending", row_id),
            )

        await self.store.call(op, write=True)

    async def outbox_pending(self, transports: Collection[str] | None = None) -> int:
        """Parts still to send (only those of `transports`, if given: the others have no
        sender in this process)."""
        names = json.dumps(list(transports or ()))
        where = "" if transports is None else " AND transport IN (SELECT value FROM json_each(?))"

        def op(db: sqlite3.Connection) -> int:
            query = "SELECT count(*) FROM outbox WHERE status = 'pending'" + where
            return int(db.execute(query, () if transports is None else (names,)).fetchone()[0])

        return await self.store.call(op)

    # -- retention ------------------------------------------------------------------------

    async def sweep(self, ages: Retention, now: float | None = None) -> dict[str, int]:
        """Delete what is older than its age: finished inbox rows (the dedupe memory),
        finished outbox rows, audit rows, cron runs and, when an age is set for them,
        messages a summary replaced. Pending work is never touched."""
        at = time.time() if now is None else now

        def op(db: sqlite3.Connection) -> dict[str, int]:
            compacted = 0
            if ages.compacted is not None:
                compacted = db.execute(
                    "DELETE FROM messages WHERE id IN (SELECT id FROM messages"
                    " WHERE compacted = 1 AND created_at < ? LIMIT ?)",
                    (at - ages.compacted, SWEEP_BATCH),
                ).rowcount
            return {
                "compacted": compacted,
                "inbox": db.execute(
                    "DELETE FROM inbox WHERE received_at < ? AND status != 'pending'",
                    (at - ages.inbox,),
                ).rowcount,
                "outbox": db.execute(
                    "DELETE FROM outbox WHERE created_at < ? AND status != 'pending'",
                    (at - ages.outbox,),
                ).rowcount,
                "audit": db.execute(
                    "DELETE FROM tool_calls WHERE started_at < ?", (at - ages.audit,)
                ).rowcount,
                "cron_runs": db.execute(
                    "DELETE FROM cron_runs WHERE scheduled_at < ? AND status != 'running'",
                    (at - ages.cron_runs,),
                ).rowcount,
            }

        return await self.store.call(op, write=True)

    async def media_in_use(self) -> set[str]:
        """The sha256 of every file a stored message, a pending inbound (or the files its
        turn sent) or an unsent reply still refers to (what the blob sweep must keep)."""

        def op(db: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            rows = db.execute("SELECT content FROM messages WHERE instr(content, '\"sha256\"') > 0")
            for (content,) in rows:
                found.update(
                    str(block["sha256"])
                    for block in json.loads(content)
                    if isinstance(block, dict) and "sha256" in block
                )
            for (stored,) in db.execute(
                "SELECT attachments FROM inbox WHERE attachments IS NOT NULL"
                " AND status = 'pending' UNION ALL SELECT attachment FROM outbox"
                " WHERE attachment IS NOT NULL AND status = 'pending'"
            ):
                found.update(a.sha256 for a in files_of(stored))
            for (stored,) in db.execute(
                "SELECT files_out FROM inbox WHERE files_out IS NOT NULL AND status = 'pending'"
            ):
                found.update(a.sha256 for a, _ in sent_files(stored))
            return found

        return await self.store.call(op)

    # -- chats and sessions ---------------------------------------------------------------

    async def session_for(self, session_key: str) -> str | None:
        def op(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT session_id FROM chat_sessions WHERE session_key = ?", (session_key,)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self.store.call(op)

    async def bind_session(
        self,
        session_key: str,
        session_id: str,
        *,
        owner: str | None = None,
        chat: str | None = None,
        agent: str = DEFAULT_AGENT,
    ) -> None:
        """Make `session_id` the session of a chat; owner (`transport:sender`) and chat
        (`transport:chat_id`) scope what recall may show in it, within its `agent`'s."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO chat_sessions (session_key, session_id, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (session_key) DO UPDATE SET session_id = excluded.session_id,"
                " updated_at = excluded.updated_at",
                (session_key, session_id, time.time()),
            )
            db.execute(
                "UPDATE sessions SET owner = coalesce(owner, ?), chat = coalesce(chat, ?),"
                " agent = ? WHERE id = ?",
                (owner, chat, agent, session_id),
            )

        await self.store.call(op, write=True)

    # -- pairing --------------------------------------------------------------------------

    async def is_allowed(self, transport: str, sender_id: str) -> bool:
        def op(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT 1 FROM allowed_senders WHERE transport = ? AND sender_id = ?",
                (transport, sender_id),
            ).fetchone()
            return row is not None

        return await self.store.call(op)

    async def pairing_code(
        self, transport: str, sender_id: str, chat_id: str, new_code: str, ttl: float
    ) -> PairingGrant | None:
        """The sender's live code, or `new_code` if they have none; None if the owner
        rejected them lately. One code per sender: writing again never makes another. When
        the transport already has MAX_PENDING_CODES pending, the oldest is evicted (its
        sender was sent it long since and may ask again), so a newcomer always gets a code."""
        now = time.time()

        def op(db: sqlite3.Connection) -> PairingGrant | None:
            db.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (now,))
            db.execute(
                "DELETE FROM transport_state WHERE key LIKE ? AND CAST(value AS REAL) <= ?",
                (REJECTED_KEY + "%", now),
            )
            if db.execute(
                "SELECT 1 FROM transport_state WHERE transport = ? AND key = ?",
                (transport, REJECTED_KEY + sender_id),
            ).fetchone():
                return None
            row = db.execute(
                "SELECT code FROM pairing_codes WHERE transport = ? AND sender_id = ?",
                (transport, sender_id),
            ).fetchone()
            if row is not None:
                return PairingGrant(code=str(row[0]), new=False)
            evicted = None
            count = db.execute(
                "SELECT count(*) FROM pairing_codes WHERE transport = ?", (transport,)
            ).fetchone()[0]
            if count >= MAX_PENDING_CODES:
                oldest = db.execute(
                    f"SELECT {CODE_COLUMNS} FROM pairing_codes WHERE transport = ?"
                    " ORDER BY created_at, rowid LIMIT 1",
                    (transport,),
                ).fetchone()
                evicted = pairing_code_of(oldest)
                db.execute("DELETE FROM pairing_codes WHERE code = ?", (evicted.code,))
            db.execute(
                "INSERT INTO pairing_codes (code, transport, sender_id, chat_id, created_at,"
                " expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                (new_code, transport, sender_id, chat_id, now, now + ttl),
            )
            return PairingGrant(code=new_code, new=True, evicted=evicted)

        return await self.store.call(op, write=True)

    @staticmethod
    def _codes(db: sqlite3.Connection) -> list[PairingCode]:
        rows = db.execute(
            f"SELECT {CODE_COLUMNS} FROM pairing_codes WHERE expires_at > ?"
            " ORDER BY created_at, rowid",
            (time.time(),),
        ).fetchall()
        return [pairing_code_of(r) for r in rows]

    def pairing_codes_sync(self) -> list[PairingCode]:
        return self.store.call_sync(self._codes)

    async def pairing_codes(self) -> list[PairingCode]:
        return await self.store.call(self._codes)

    def _take_code(self, db: sqlite3.Connection, code: str) -> PairingCode | None:
        """Remove a live code (any case) and return it; None if there is no such code."""
        row = db.execute(
            f"SELECT {CODE_COLUMNS} FROM pairing_codes WHERE code = ? AND expires_at > ?",
            (code.strip().upper(), time.time()),
        ).fetchone()
        if row is None:
            return None
        db.execute("DELETE FROM pairing_codes WHERE code = ?", (row[0],))
        return pairing_code_of(row)

    def approve_sync(self, code: str) -> PairingCode | None:
        """Admit the sender behind a live code; None if no such code (or it expired)."""
        return self.store.call_sync(self._approve(code), write=True)

    async def approve(self, code: str) -> PairingCode | None:
        return await self.store.call(self._approve(code), write=True)

    def _approve(self, code: str) -> Callable[[sqlite3.Connection], PairingCode | None]:
        def op(db: sqlite3.Connection) -> PairingCode | None:
            found = self._take_code(db, code)
            if found is not None:
                db.execute(
                    "INSERT OR IGNORE INTO allowed_senders (transport, sender_id, approved_at)"
                    " VALUES (?, ?, ?)",
                    (found.transport, found.sender_id, time.time()),
                )
                db.execute(
                    "DELETE FROM transport_state WHERE transport = ? AND key = ?",
                    (found.transport, REJECTED_KEY + found.sender_id),
                )
            return found

        return op

    def reject_sync(self, code: str, *, for_seconds: float = REJECTED_FOR) -> PairingCode | None:
        """Drop a live code; its sender gets no new one for `for_seconds`. None if no such
        code (or it expired)."""
        return self.store.call_sync(self._reject(code, for_seconds), write=True)

    async def reject(self, code: str, *, for_seconds: float = REJECTED_FOR) -> PairingCode | None:
        return await self.store.call(self._reject(code, for_seconds), write=True)

    def _reject(
        self, code: str, for_seconds: float
    ) -> Callable[[sqlite3.Connection], PairingCode | None]:
        def op(db: sqlite3.Connection) -> PairingCode | None:
            found = self._take_code(db, code)
            if found is not None:
                db.execute(
                    "INSERT INTO transport_state (transport, key, value) VALUES (?, ?, ?)"
                    " ON CONFLICT (transport, key) DO UPDATE SET value = excluded.value",
                    (
                        found.transport,
                        REJECTED_KEY + found.sender_id,
                        str(time.time() + for_seconds),
                    ),
                )
            return found

        return op


class TransportState:
    """A transport's own key-value state in the store (matrix: session token, sync position)."""

    def __init__(self, store: Store, transport: str) -> None:
        self.store = store
        self.transport = transport

    async def get(self, key: str) -> str | None:
        def op(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT value FROM transport_state WHERE transport = ? AND key = ?",
                (self.transport, key),
            ).fetchone()
            return None if row is None or row[0] == "" else str(row[0])

        return await self.store.call(op)

    async def set(self, key: str, value: str) -> None:
        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO transport_state (transport, key, value) VALUES (?, ?, ?)"
                " ON CONFLICT (transport, key) DO UPDATE SET value = excluded.value",
                (self.transport, key, value),
            )

        await self.store.call(op, write=True)
