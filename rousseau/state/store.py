"""The SQLite store: sessions and their messages, one row per message.

One connection per Store, owned by a worker thread (state/worker.py), so the event loop never
waits on the disk and writes queued together share a commit. Several processes may share the
file: WAL, a 15 s busy timeout and BEGIN IMMEDIATE keep concurrent writers from failing.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog

from rousseau.agent import Compaction, Content, Message, Role, Session, StoreError, Usage
from rousseau.agent.protocols import ToolCallRecord
from rousseau.messages import DEFAULT_AGENT
from rousseau.private import private_file
from rousseau.state.checkpoint import BACKSTOP_PAGES, Checkpointer
from rousseau.state.migrations import copy_before, migrate
from rousseau.state.protocol import Recalled, SearchHit, SessionInfo
from rousseau.state.records import ImportedSession, SessionCopied
from rousseau.state.worker import DBWorker, WorkerTimeout

T = TypeVar("T")
log = structlog.get_logger("rousseau.state")

TITLE_LENGTH = 60
PAGE_CACHE_KIB = 1024
"""The writer's page cache. SQLite's default, 2 MiB, filled with pages read once (new rows,
full-text index segments); what is read again (index interior pages) fits in less, and the
rest comes from the system's file cache."""


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


class Store:
    """Sessions and messages in one SQLite file (or `:memory:` for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            self.path = str(Path(self.path).expanduser())
            try:
                private_file(Path(self.path))
            except OSError as exc:
                raise StoreError(f"cannot create the folder for {self.path}: {exc}") from exc
        try:
            self._worker = DBWorker(self._connect)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the session store at {self.path}: {exc}") from exc
        self._worker.on_error = self._write_failed
        self._checkpointer = (
            None if self.path == ":memory:" else Checkpointer(self.path, self._worker.wrote)
        )
        self.full = False
        """The last write failed for want of space; cleared by the next write that lands."""

    def _write_failed(self, exc: BaseException) -> None:
        if _is_full(exc):
            self._set_full(exc)
        else:
            log.error("store.write_failed", path=self.path, error=str(exc))

    def _set_full(self, exc: BaseException) -> None:
        if not self.full:
            self.full = True
            log.error(
                "store.full",
                path=self.path,
                error=str(exc),
                hint="free disk space; new messages wait (unacknowledged) until writes succeed",
            )

    def _wrote(self) -> None:
        if self.full:
            self.full = False
            log.info("store.recovered", path=self.path)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=15.0)
        try:
            conn.execute("PRAGMA busy_timeout = 15000")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
            if self.path != ":memory:":
                _wal(conn)
                conn.execute("PRAGMA synchronous = NORMAL")
                # Checkpoints are the checkpointer's, off this connection's commits; this is
                # the backstop should it fall behind.
                conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
            migrate(conn, before=copy_before(self.path) if self.path != ":memory:" else None)
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, for tests that inspect the file; only touch it from the worker."""
        return self._worker.conn

    # -- plumbing -------------------------------------------------------------------------

    def call_sync(self, fn: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        """Run `fn(conn)` on the store's thread and wait (write: inside a transaction)."""
        if self._worker.stopped:
            raise StoreError("the session store is closed")
        try:
            result = self._worker.call_sync(fn, write=write)
        except (sqlite3.Error, WorkerTimeout) as exc:
            raise self._failed(exc) from exc
        if write:
            self._wrote()
        return result

    async def call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        write: bool = False,
        *,
        urgent: bool = False,
        after: str | None = None,
    ) -> T:
        """Await `fn(conn)` on the store's thread (write: inside a transaction; urgent: ahead
        of the queued work; after a session id: only if its queued writes were all made, see
        DBWorker.call)."""
        if self._worker.stopped:
            raise StoreError("the session store is closed")
        try:
            result = await self._worker.call(fn, write=write, urgent=urgent, after=after)
        except (sqlite3.Error, WorkerTimeout) as exc:
            raise self._failed(exc) from exc
        if write:
            self._wrote()
        return result

    def _failed(self, exc: BaseException) -> StoreError:
        if _is_full(exc):
            self._set_full(exc)
            return StoreFullError(f"session store: {exc}")
        return StoreError(f"session store: {exc}")

    async def submit(
        self,
        fn: Callable[[sqlite3.Connection], object],
        *,
        key: str | None = None,
        after: str | None = None,
    ) -> None:
        """Queue a write without waiting for its commit; later operations run after it.

        If it fails, `flush(key)` raises (so a turn whose history was not saved fails). With
        `after`, it is made only if the writes queued under that key before it were.
        """
        if self._worker.stopped:
            raise StoreError("the session store is closed")
        await self._worker.submit(fn, key=key, after=after)

    # -- operations (run on the worker thread) --------------------------------------------

    @staticmethod
    def _create(sid: str, title: str) -> Callable[[sqlite3.Connection], Session]:
        def op(db: sqlite3.Connection) -> Session:
            now = time.time()
            db.execute(
                "INSERT OR IGNORE INTO sessions (id, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?)",
                (sid, title[:TITLE_LENGTH], now, now),
            )
            return Session(id=sid)

        return op

    @staticmethod
    def _load(session_id: str) -> Callable[[sqlite3.Connection], Session | None]:
        def op(db: sqlite3.Connection) -> Session | None:
            row = db.execute("SELECT summary FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                return None
            messages = [
                decode_message(role, content)
                for role, content in db.execute(
                    "SELECT role, content FROM messages WHERE session_id = ? AND compacted = 0"
                    " ORDER BY id",
                    (session_id,),
                )
            ]
            session = Session(id=session_id, messages=messages)
            if row[0] is not None:
                session.messages.insert(0, decode_message(Role.USER.value, row[0]))
                session.cacheable_messages = 1
            return session

        return op

    @staticmethod
    def _append(
        session_id: str, message: Message, usage: Usage | None
    ) -> Callable[[sqlite3.Connection], None]:
        content = encode_content(message)
        text = message.text
        title = title_of(text) if message.role is Role.USER else ""
        u = usage or Usage()
        tokens = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)

        def op(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, message_count,"
                " input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)"
                " VALUES (?1, ?2, ?3, ?3, 1, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO UPDATE SET"
                " updated_at = ?3, message_count = message_count + 1,"
                " title = CASE WHEN title = '' THEN ?2 ELSE title END,"
                " input_tokens = input_tokens + ?4, output_tokens = output_tokens + ?5,"
                " cache_read_tokens = cache_read_tokens + ?6,"
                " cache_write_tokens = cache_write_tokens + ?7",
                (session_id, title, now, *tokens),
            )
            db.execute(
                "INSERT INTO messages (session_id, role, content, text, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, message.role.value, content, text, now),
            )

        return op

    @staticmethod
    def _compact(session_id: str, compaction: Compaction) -> Callable[[sqlite3.Connection], None]:
        summary = json.dumps([c.to_dict() for c in compaction.summary.content], ensure_ascii=False)

        def op(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT summary FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                raise StoreError(f"no such session: {session_id}")
            hide = compaction.removed - (1 if row[0] is not None else 0)
            db.execute(
                "UPDATE messages SET compacted = 1 WHERE id IN (SELECT id FROM messages"
                " WHERE session_id = ? AND compacted = 0 ORDER BY id LIMIT ?)",
                (session_id, max(hide, 0)),
            )
            db.execute(
                "UPDATE sessions SET summary = ?, updated_at = ? WHERE id = ?",
                (summary, time.time(), session_id),
            )

        return op

    @staticmethod
    def _list(
        limit: int, session_id: str | None = None, *, parent: str | None = None
    ) -> Callable[[sqlite3.Connection], list[SessionInfo]]:
        where = ""
        params: tuple[object, ...] = (limit,)
        for column, value in (("id", session_id), ("parent", parent)):
            if value is not None:
                where, params = f"WHERE {column} = ?", (value, limit)

        def op(db: sqlite3.Connection) -> list[SessionInfo]:
            rows = db.execute(
                "SELECT id, title, message_count, created_at, updated_at, input_tokens,"
                " output_tokens, cache_read_tokens, cache_write_tokens, agent, parent FROM sessions"
                f" {where} ORDER BY updated_at DESC LIMIT ?",
                params,
            )
            return [_info(r) for r in rows]

        return op

    @staticmethod
    def _usage_total(db: sqlite3.Connection) -> tuple[int, Usage]:
        r = db.execute(
            "SELECT count(*), total(input_tokens), total(output_tokens),"
            " total(cache_read_tokens), total(cache_write_tokens) FROM sessions"
        ).fetchone()
        return int(r[0]), Usage(
            input_tokens=int(r[1]),
            output_tokens=int(r[2]),
            cache_read_tokens=int(r[3]),
            cache_write_tokens=int(r[4]),
        )

    @staticmethod
    def _search(query: str, limit: int) -> Callable[[sqlite3.Connection], list[SearchHit]]:
        from rousseau.state.recall import search_op

        find = search_op(query, limit, recall=False)

        def op(db: sqlite3.Connection) -> list[SearchHit]:
            hits = find(db)
            titles = dict(
                db.execute(
                    f"SELECT id, title FROM sessions WHERE id IN ({','.join('?' * len(hits))})",
                    [h.session_id for h in hits],
                ).fetchall()
            )
            return [
                SearchHit(
                    session_id=h.session_id,
                    title=titles.get(h.session_id, ""),
                    role=Role(h.role),
                    text=h.snippet,
                    created_at=h.created_at,
                )
                for h in hits
            ]

        return op

    @staticmethod
    def _delete(session_id: str) -> Callable[[sqlite3.Connection], bool]:
        def op(db: sqlite3.Connection) -> bool:
            return db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0

        return op

    @staticmethod
    def _touch(db: sqlite3.Connection) -> None:
        db.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (-1, 'check', 0)"
        )
        db.execute("DELETE FROM schema_migrations WHERE version = -1")

    # -- sync API (used from threads and the CLI) -----------------------------------------

    def create_session_sync(self, session_id: str | None = None, title: str = "") -> Session:
        return self.call_sync(self._create(session_id or new_session_id(), title), write=True)

    def load_sync(self, session_id: str) -> Session | None:
        return self.call_sync(self._load(session_id))

    def append_message_sync(
        self, session_id: str, message: Message, usage: Usage | None = None
    ) -> None:
        self.call_sync(self._append(session_id, message, usage), write=True)

    def info_sync(self, session_id: str) -> SessionInfo | None:
        found = self.call_sync(self._list(1, session_id))
        return found[0] if found else None

    def totals_sync(self) -> tuple[int, Usage]:
        """How many sessions there are and what they cost, all together."""
        return self.call_sync(self._usage_total)

    def compact_sync(self, session_id: str, compaction: Compaction) -> None:
        """Hide the oldest live messages behind a summary; they stay stored for search."""
        self.call_sync(self._compact(session_id, compaction), write=True)

    def list_sync(self, limit: int = 50) -> list[SessionInfo]:
        return self.call_sync(self._list(limit))

    def search_sync(self, query: str, limit: int = 20) -> list[SearchHit]:
        return self.call_sync(self._search(query, limit))

    def delete_sync(self, session_id: str) -> bool:
        return self.call_sync(self._delete(session_id), write=True)

    def resolve_sync(self, prefix: str) -> str:
        """The id of the one session whose id is `prefix` or starts with it; StoreError
        when none does or several do (naming a few)."""
        return resolved(prefix, self.call_sync(self._starting(prefix)) if prefix else [])

    @staticmethod
    def _starting(prefix: str) -> Callable[[sqlite3.Connection], list[str]]:
        def op(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT id FROM sessions WHERE substr(id, 1, length(?1)) = ?1"
                " ORDER BY id != ?1, updated_at DESC LIMIT 4",
                (prefix,),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return op

    def check_writable_sync(self) -> None:
        """Commit a write that changes nothing, to prove the file accepts writes."""
        self.call_sync(self._touch, write=True)

    def close(self, timeout: float | None = None) -> None:
        """Finish queued work, checkpoint the WAL into the main file and close. Idempotent.

        Waits at most `timeout` (default: the worker's deadline) for a busy database."""

        def checkpoint(db: sqlite3.Connection) -> None:
            if self.path != ":memory:":
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        if self._checkpointer is not None:  # not beside the final checkpoint
            self._checkpointer.stop()
        try:
            self._worker.stop(final=checkpoint, timeout=timeout)
        except (sqlite3.Error, WorkerTimeout) as exc:
            log.error("store.checkpoint_failed", path=self.path, error=str(exc))

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- async API ------------------------------------------------------------------------

    async def create_session(self, session_id: str | None = None, title: str = "") -> Session:
        return await self.call(self._create(session_id or new_session_id(), title), write=True)

    async def load(self, session_id: str) -> Session | None:
        return await self.call(self._load(session_id))

    async def load_or_create(self, session_id: str) -> Session:
        session = await self.load(session_id)
        return session if session is not None else await self.create_session(session_id)

    async def append_message(
        self, session_id: str, message: Message, usage: Usage | None = None
    ) -> None:
        """Queue the message for writing; it is committed before any later store operation.

        Not waiting for the commit keeps the agent loop fast; `flush()` (which the loop calls
        at the end of each turn) waits for it.
        """
        if self._worker.stopped:
            raise StoreError("the session store is closed")
        await self._worker.submit(self._append(session_id, message, usage), key=session_id)

    async def get_external_session(self, session_id: str, provider: str) -> str | None:
        """A provider's own id for this session (claudecli's CLI session), if it has one."""

        def op(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT external_id FROM external_sessions WHERE session_id = ? AND provider = ?",
                (session_id, provider),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self.call(op)

    async def set_external_session(self, session_id: str, provider: str, external: str) -> None:
        def op(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute(
                "INSERT OR IGNORE INTO sessions (id, title, created_at, updated_at)"
                " VALUES (?, '', ?, ?)",
                (session_id, now, now),
            )
            db.execute(
                "INSERT INTO external_sessions (session_id, provider, external_id)"
                " VALUES (?, ?, ?) ON CONFLICT (session_id, provider)"
                " DO UPDATE SET external_id = excluded.external_id",
                (session_id, provider, external),
            )

        await self.call(op, write=True)

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        """The audit trail (queued with the session's messages, in order)."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO tool_calls (session_id, tool, input_digest, decision, decided_by,"
                " reason, started_at, duration, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                tool_call_params(record),
            )

        await self.submit(op)

    def tool_calls_sync(
        self, limit: int = 50, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        """The newest audit records first."""
        return self.call_sync(self._tool_calls(limit, session_id))

    @staticmethod
    def _tool_calls(
        limit: int, session_id: str | None
    ) -> Callable[[sqlite3.Connection], list[ToolCallRecord]]:
        where, args = (
            ("WHERE session_id = ?", (session_id, limit)) if session_id else ("", (limit,))
        )

        def op(db: sqlite3.Connection) -> list[ToolCallRecord]:
            rows = db.execute(
                "SELECT session_id, tool, input_digest, decision, decided_by, reason, started_at,"
                f" duration, outcome FROM tool_calls {where} ORDER BY id DESC LIMIT ?",
                args,
            )
            return [tool_call_of(r) for r in rows]

        return op

    async def totals(self) -> tuple[int, Usage]:
        return await self.call(self._usage_total)

    async def import_session(self, imported: ImportedSession) -> SessionCopied:
        s = imported

        def op(db: sqlite3.Connection) -> SessionCopied:
            added = db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, message_count, owner,"
                " chat) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (
                    *(s.id, s.title[:TITLE_LENGTH], s.created_at, s.updated_at),
                    *(len(s.messages), s.owner, s.chat),
                ),
            )
            if not added.rowcount:
                return SessionCopied(copied=False)
            db.executemany(
                "INSERT INTO messages (session_id, role, content, text, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(s.id, m.role.value, encode_content(m), m.text, at) for m, at in s.messages],
            )
            if s.chat_key is None:
                return SessionCopied(copied=True)
            bound = db.execute(
                "INSERT INTO chat_sessions (session_key, session_id, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (session_key) DO NOTHING",
                (s.chat_key, s.id, time.time()),
            )
            return SessionCopied(copied=True, bound=bool(bound.rowcount))

        return await self.call(op, write=True)

    async def children(self, session_id: str) -> list[SessionInfo]:
        """The sessions of the sub-agents `session_id` delegated to, the latest first."""
        return await self.call(self._list(1000, parent=session_id))

    async def info(self, session_id: str) -> SessionInfo | None:
        found = await self.call(self._list(1, session_id))
        return found[0] if found else None

    async def resolve(self, prefix: str) -> str:
        return resolved(prefix, await self.call(self._starting(prefix)) if prefix else [])

    async def tool_calls(
        self, limit: int = 50, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        return await self.call(self._tool_calls(limit, session_id))

    async def recall(
        self,
        text: str,
        limit: int,
        *,
        exclude: str | None = None,
        scope_of: str | None = None,
        agent: str | None = None,
    ) -> list[Recalled]:
        from rousseau.state.recall import search_op

        op = search_op(text, limit, exclude=exclude, scope_of=scope_of, agent=agent)
        return await self.call(op)

    async def set_scope(
        self,
        session_id: str,
        *,
        owner: str | None,
        chat: str | None,
        agent: str = DEFAULT_AGENT,
        parent: str | None = None,
    ) -> None:
        """Whose session this is, for scoped recall (None, None: the local user's), which
        agent's (recall never crosses agents), and which session delegated it, if one did."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE sessions SET owner = ?, chat = ?, agent = ?, parent = ? WHERE id = ?",
                (owner, chat, agent, parent, session_id),
            )

        await self.call(op, write=True)

    async def flush(self, session_id: str | None = None) -> None:
        """Wait until every queued write is committed; raise StoreError if one of the
        session's queued writes (any session's, without an id) could not be made."""
        await self.call(lambda db: None)
        try:
            self._worker.raise_lost(session_id)
        except Exception as exc:
            raise self._failed(exc) from exc

    async def compact(self, session_id: str, compaction: Compaction) -> None:
        await self.call(self._compact(session_id, compaction), write=True)

    async def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        return await self.call(self._list(limit))

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        return await self.call(self._search(query, limit))

    async def delete_session(self, session_id: str) -> bool:
        return await self.call(self._delete(session_id), write=True)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)


class StoreFullError(StoreError):
    """The disk (or the database's page limit) is full; writes fail until space returns."""


def _is_full(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL"


def _wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. SQLite answers "locked" at once, without waiting for the busy timeout,
    while another process is creating the same new file; so wait here, up to the same 15 s."""
    deadline = time.monotonic() + 15.0
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _info(r: tuple[Any, ...]) -> SessionInfo:
    return SessionInfo(
        id=str(r[0]),
        title=str(r[1]),
        message_count=int(r[2]),
        created_at=float(r[3]),
        updated_at=float(r[4]),
        usage=Usage(
            input_tokens=int(r[5]),
            output_tokens=int(r[6]),
            cache_read_tokens=int(r[7]),
            cache_write_tokens=int(r[8]),
        ),
        agent=str(r[9]),
        parent=r[10],
    )


def resolved(prefix: str, found: list[str]) -> str:
    """Of the ids starting with `prefix` (the exact one first, at most four), the one it
    names; StoreError when none does or several do (naming a few)."""
    if found and (found[0] == prefix or len(found) == 1):
        return found[0]
    if not found:
        raise StoreError(f"no such session: {prefix}")
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    raise StoreError(f"{prefix!r} starts several sessions ({shown}): give more of the id")


def tool_call_params(record: ToolCallRecord) -> tuple[object, ...]:
    """An audit record's values, in the order of tool_call_of's columns."""
    return (
        record.session_id,
        record.tool,
        record.input_digest,
        record.decision,
        record.decided_by,
        record.reason,
        record.started_at,
        record.duration,
        record.outcome,
    )


def tool_call_of(r: tuple[Any, ...]) -> ToolCallRecord:
    """An audit record from its columns, in the order the audit's readers select them."""
    return ToolCallRecord(
        session_id=r[0],
        tool=r[1],
        input_digest=r[2],
        decision=r[3],
        decided_by=r[4],
        reason=r[5],
        started_at=r[6],
        duration=r[7],
        outcome=r[8],
    )


def encode_content(message: Message) -> str:
    """A message's content as its row keeps it (decode_message reads it back)."""
    return json.dumps([c.to_dict() for c in message.content], ensure_ascii=False)


def decode_message(role: str, content: str) -> Message:
    return Message(role=Role(role), content=[Content.from_dict(c) for c in json.loads(content)])


def title_of(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"
