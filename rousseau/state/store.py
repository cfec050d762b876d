"""The SQLite store: sessions and their messages, one row per message.

One connection per Store, guarded by a lock; every call from async code runs in a worker
thread so the event loop never waits on the disk. Several processes may share the file:
WAL, a 15 s busy timeout and BEGIN IMMEDIATE keep concurrent writers from failing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from rousseau.agent import Compaction, Content, Message, Role, Session, StoreError
from rousseau.state.migrations import migrate

T = TypeVar("T")

TITLE_LENGTH = 60


@dataclass(kw_only=True, slots=True)
class SessionInfo:
    """A session as listed: no messages, just what identifies it."""

    id: str
    title: str
    message_count: int
    created_at: float
    updated_at: float


@dataclass(kw_only=True, slots=True)
class SearchHit:
    session_id: str
    title: str
    role: Role
    text: str
    created_at: float


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


class Store:
    """Sessions and messages in one SQLite file (or `:memory:` for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.path = str(Path(self.path).expanduser())
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=15.0
            )
            self._conn.execute("PRAGMA busy_timeout = 15000")
            self._conn.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the session store at {self.path}: {exc}") from exc
        self._closed = False

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; BEGIN IMMEDIATE takes the write lock up front (no upgrade race)."""
        with self._lock:
            if self._closed:
                raise StoreError("the session store is closed")
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"session store: {exc}") from exc

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise StoreError("the session store is closed")
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"session store: {exc}") from exc

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args)

    # -- sync API (used from threads and the CLI) -----------------------------------------

    def create_session_sync(self, session_id: str | None = None, title: str = "") -> Session:
        sid = session_id or new_session_id()
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO sessions (id, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?)",
                (sid, title[:TITLE_LENGTH], now, now),
            )
        return Session(id=sid)

    def load_sync(self, session_id: str) -> Session | None:
        rows = self._read("SELECT summary FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            return None
        messages = [
            _decode(role, content)
            for role, content in self._read(
                "SELECT role, content FROM messages WHERE session_id = ? AND compacted = 0"
                " ORDER BY id",
                (session_id,),
            )
        ]
        summary = rows[0][0]
        session = Session(id=session_id, messages=messages)
        if summary is not None:
            session.messages.insert(0, _decode(Role.USER.value, summary))
            session.cacheable_messages = 1
        return session

    def append_message_sync(self, session_id: str, message: Message) -> None:
        content = json.dumps([c.to_dict() for c in message.content], ensure_ascii=False)
        text = message.text
        now = time.time()
        title = _title(text) if message.role is Role.USER else ""
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO sessions (id, title, created_at, updated_at)"
                " VALUES (?, '', ?, ?)",
                (session_id, now, now),
            )
            db.execute(
                "INSERT INTO messages (session_id, role, content, text, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, message.role.value, content, text, now),
            )
            db.execute(
                "UPDATE sessions SET updated_at = ?, message_count = message_count + 1,"
                " title = CASE WHEN title = '' THEN ? ELSE title END WHERE id = ?",
                (now, title, session_id),
            )

    def compact_sync(self, session_id: str, compaction: Compaction) -> None:
        """Hide the oldest live messages behind a summary; they stay stored for search."""
        summary = json.dumps([c.to_dict() for c in compaction.summary.content], ensure_ascii=False)
        with self._write() as db:
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

    def list_sync(self, limit: int = 50) -> list[SessionInfo]:
        rows = self._read(
            "SELECT id, title, message_count, created_at, updated_at FROM sessions"
            " ORDER BY updated_at DESC LIMIT ?",
            (limit,),
        )
        return [
            SessionInfo(id=r[0], title=r[1], message_count=r[2], created_at=r[3], updated_at=r[4])
            for r in rows
        ]

    def search_sync(self, query: str, limit: int = 20) -> list[SearchHit]:
        escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._read(
            "SELECT m.session_id, s.title, m.role, m.text, m.created_at FROM messages m"
            " JOIN sessions s ON s.id = m.session_id"
            " WHERE m.text LIKE ? ESCAPE '\\' ORDER BY m.id DESC LIMIT ?",
            (f"%{escaped}%", limit),
        )
        return [
            SearchHit(session_id=r[0], title=r[1], role=Role(r[2]), text=r[3], created_at=r[4])
            for r in rows
        ]

    def delete_sync(self, session_id: str) -> bool:
        with self._write() as db:
            cur = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            return cur.rowcount > 0

    def check_writable_sync(self) -> None:
        """Commit a write that changes nothing, to prove the file accepts writes."""
        with self._write() as db:
            db.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (-1, 'check', 0)"
            )
            db.execute("DELETE FROM schema_migrations WHERE version = -1")

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self.path != ":memory:":
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._conn.close()

    # -- async API ------------------------------------------------------------------------

    async def create_session(self, session_id: str | None = None, title: str = "") -> Session:
        return await self._run(self.create_session_sync, session_id, title)

    async def load(self, session_id: str) -> Session | None:
        return await self._run(self.load_sync, session_id)

    async def load_or_create(self, session_id: str) -> Session:
        session = await self.load(session_id)
        return session if session is not None else await self.create_session(session_id)

    async def append_message(self, session_id: str, message: Message) -> None:
        await self._run(self.append_message_sync, session_id, message)

    async def compact(self, session_id: str, compaction: Compaction) -> None:
        await self._run(self.compact_sync, session_id, compaction)

    async def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        return await self._run(self.list_sync, limit)

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        return await self._run(self.search_sync, query, limit)

    async def delete_session(self, session_id: str) -> bool:
        return await self._run(self.delete_sync, session_id)

    async def aclose(self) -> None:
        await self._run(self.close)


def _decode(role: str, content: str) -> Message:
    return Message(role=Role(role), content=[Content.from_dict(c) for c in json.loads(content)])


def _title(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"
