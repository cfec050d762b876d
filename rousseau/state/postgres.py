"""The PostgreSQL store: the sessions, messages, audit trail and recall of state/store.py, on a
server that several daemons can share (psycopg 3 with its connection pool).

Recall indexes each message's words as rousseau spells them (words_of: lower case, accents
removed) in a `tsvector` of the `simple` configuration with a GIN index, so a word matches
here exactly when it matches in SQLite's unicode61 index. Every write is awaited: there is no
queue to flush, and a write that fails raises where it was made.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from rousseau.agent import Compaction, Message, Role, Session, StoreError, Usage
from rousseau.agent.protocols import ToolCallRecord
from rousseau.messages import DEFAULT_AGENT
from rousseau.state.migrations import check_not_newer
from rousseau.state.postgres_migrations import MIGRATIONS
from rousseau.state.protocol import Recalled, SearchHit, SessionInfo
from rousseau.state.recall import CANDIDATES, RANKED, probed, rarest, words_of
from rousseau.state.records import ImportedSession, SessionCopied
from rousseau.state.store import (
    TITLE_LENGTH,
    StoreFullError,
    decode_message,
    encode_content,
    new_session_id,
    resolved,
    title_of,
    tool_call_of,
    tool_call_params,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

log = structlog.get_logger("rousseau.state")

MIGRATION_LOCK = 0x726F7573  # the advisory lock daemons starting at once take to migrate
SNIPPET = "StartSel='',StopSel='',MaxWords=24,MinWords=12,ShortWord=1"


def _failed(exc: Exception) -> StoreError:
    """psycopg's error as the store's: a full disk (disk_full, SQLSTATE 53100) is the same
    StoreFullError as SQLite's, which the router waits out instead of giving up on."""
    if getattr(exc, "sqlstate", None) == "53100":
        return StoreFullError(f"session store: {exc}")
    return StoreError(f"session store: {exc}")


def any_word(words: list[str]) -> str | None:
    """A tsquery matching any of the words (each quoted: no query syntax gets through)."""
    return " | ".join(f"'{w}'" for w in words) or None


def every_prefix(words: list[str]) -> str | None:
    """A tsquery matching every word, each as a prefix."""
    return " & ".join(f"'{w}':*" for w in words) or None


class PostgresStore:
    """A SessionStore on PostgreSQL. Open it with `await PostgresStore.open(url)`."""

    def __init__(self, pool: AsyncConnectionPool, url: str = "") -> None:
        self._pool = pool
        self.url = url
        """Where it connects (for a connection of its own, such as a poller's lock)."""
        self._urgent: AsyncConnection[Any] | None = None
        self._urgent_lock = anyio.Lock()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        max_size: int = 10,
        wait: float = 15.0,
        before: Callable[[int], Awaitable[None]] | None = None,
    ) -> PostgresStore:
        """Connect (a pool of at most `max_size` connections) and bring the schema up to
        date (`before` awaited first, with the newest version to come, when a store holding
        data is to change); StoreError, naming the server, if it cannot be reached in `wait`
        seconds, or if its schema is newer than this code's."""
        import psycopg
        from psycopg_pool import AsyncConnectionPool, PoolTimeout

        pool: AsyncConnectionPool = AsyncConnectionPool(
            url, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True}
        )
        try:
            await pool.open(wait=True, timeout=wait)
            store = cls(pool, url)
            await store._migrate(before)
        except (psycopg.Error, PoolTimeout) as exc:
            await pool.close()
            where = psycopg.conninfo.conninfo_to_dict(url)
            raise StoreError(
                f"cannot open the session store on PostgreSQL at {where.get('host', 'localhost')}"
                f":{where.get('port', 5432)}/{where.get('dbname', '')}: {exc}"
            ) from exc
        return store

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection of the pool inside a transaction; psycopg's errors become
        StoreError."""
        import psycopg

        try:
            async with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as exc:
            raise _failed(exc) from exc

    @asynccontextmanager
    async def urgent(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection of its own, never queued behind the pool, for a write whose delay is
        a risk in itself: recording that a part went out (until then, a crash sends it
        again)."""
        import psycopg

        async with self._urgent_lock:
            try:
                if self._urgent is None or self._urgent.closed:
                    self._urgent = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
                yield self._urgent
            except psycopg.Error as exc:
                if self._urgent is not None:
                    await self._urgent.close()
                self._urgent = None
                raise _failed(exc) from exc

    async def _migrate(self, before: Callable[[int], Awaitable[None]] | None = None) -> list[int]:
        async with self.transaction() as db:
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
                " name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            cursor = await db.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cursor.fetchall()}
            check_not_newer(done, MIGRATIONS)
            pending = [m.version for m in MIGRATIONS if m.version not in done]
            if done and pending and before is not None:
                await before(max(pending))
            applied = []
            for migration in MIGRATIONS:
                if migration.version in done:
                    continue
                for statement in migration.statements:
                    await db.execute(statement)
                await db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, time.time()),
                )
                applied.append(migration.version)
        if applied:
            log.info("store.migrated", backend="postgres", versions=applied)
        return applied

    # -- sessions and messages -------------------------------------------------------------

    async def create_session(self, session_id: str | None = None, title: str = "") -> Session:
        sid = session_id or new_session_id()
        now = time.time()
        async with self.transaction() as db:
            await db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (sid, title[:TITLE_LENGTH], now, now),
            )
        return Session(id=sid)

    async def load(self, session_id: str) -> Session | None:
        async with self.transaction() as db:
            cursor = await db.execute("SELECT summary FROM sessions WHERE id = %s", (session_id,))
            row = await cursor.fetchone()
            if row is None:
                return None
            cursor = await db.execute(
                "SELECT role, content FROM messages WHERE session_id = %s AND NOT compacted"
                " ORDER BY id",
                (session_id,),
            )
            messages = [decode_message(role, content) for role, content in await cursor.fetchall()]
        session = Session(id=session_id, messages=messages)
        if row[0] is not None:
            session.messages.insert(0, decode_message(Role.USER.value, row[0]))
            session.cacheable_messages = 1
        return session

    async def load_or_create(self, session_id: str) -> Session:
        session = await self.load(session_id)
        return session if session is not None else await self.create_session(session_id)

    async def append_message(
        self, session_id: str, message: Message, usage: Usage | None = None
    ) -> None:
        content = encode_content(message)
        text = message.text
        title = title_of(text) if message.role is Role.USER else ""
        u = usage or Usage()
        now = time.time()
        async with self.transaction() as db:
            await db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, message_count,"
                " input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)"
                " VALUES (%(id)s, %(title)s, %(now)s, %(now)s, 1, %(i)s, %(o)s, %(r)s, %(w)s)"
                " ON CONFLICT (id) DO UPDATE SET updated_at = %(now)s,"
                " message_count = sessions.message_count + 1,"
                " title = CASE WHEN sessions.title = '' THEN %(title)s ELSE sessions.title END,"
                " input_tokens = sessions.input_tokens + %(i)s,"
                " output_tokens = sessions.output_tokens + %(o)s,"
                " cache_read_tokens = sessions.cache_read_tokens + %(r)s,"
                " cache_write_tokens = sessions.cache_write_tokens + %(w)s",
                {
                    "id": session_id,
                    "title": title,
                    "now": now,
                    "i": u.input_tokens,
                    "o": u.output_tokens,
                    "r": u.cache_read_tokens,
                    "w": u.cache_write_tokens,
                },
            )
            await db.execute(
                "INSERT INTO messages (session_id, role, content, text, words, created_at)"
                " VALUES (%s, %s, %s, %s, to_tsvector('simple', %s), %s)",
                (
                    session_id,
                    message.role.value,
                    content,
                    text,
                    " ".join(words_of(text, recall=False)),
                    now,
                ),
            )

    async def flush(self, session_id: str | None = None) -> None:
        """Nothing is queued here: every write was awaited where it was made."""

    async def compact(self, session_id: str, compaction: Compaction) -> None:
        summary = json.dumps([c.to_dict() for c in compaction.summary.content], ensure_ascii=False)
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT summary FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            row = await cursor.fetchone()
            if row is None:
                raise StoreError(f"no such session: {session_id}")
            hide = compaction.removed - (1 if row[0] is not None else 0)
            await db.execute(
                "UPDATE messages SET compacted = TRUE WHERE id IN (SELECT id FROM messages"
                " WHERE session_id = %s AND NOT compacted ORDER BY id LIMIT %s)",
                (session_id, max(hide, 0)),
            )
            await db.execute(
                "UPDATE sessions SET summary = %s, updated_at = %s WHERE id = %s",
                (summary, time.time(), session_id),
            )

    async def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        return await self._listed("", (limit,))

    async def _listed(self, where: str, args: tuple[object, ...]) -> list[SessionInfo]:
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT id, title, message_count, created_at, updated_at, input_tokens,"
                " output_tokens, cache_read_tokens, cache_write_tokens, agent, parent FROM sessions"
                f" {where} ORDER BY updated_at DESC LIMIT %s",
                args,
            )
            rows = await cursor.fetchall()
        return [
            SessionInfo(
                id=r[0],
                title=r[1],
                message_count=r[2],
                created_at=r[3],
                updated_at=r[4],
                usage=Usage(
                    input_tokens=r[5],
                    output_tokens=r[6],
                    cache_read_tokens=r[7],
                    cache_write_tokens=r[8],
                ),
                agent=r[9],
                parent=r[10],
            )
            for r in rows
        ]

    async def children(self, session_id: str) -> list[SessionInfo]:
        return await self._listed("WHERE parent = %s", (session_id, 1000))

    async def info(self, session_id: str) -> SessionInfo | None:
        found = await self._listed("WHERE id = %s", (session_id, 1))
        return found[0] if found else None

    async def resolve(self, prefix: str) -> str:
        found: list[str] = []
        if prefix:
            async with self.transaction() as db:
                cursor = await db.execute(
                    "SELECT id FROM sessions WHERE starts_with(id, %(p)s)"
                    " ORDER BY id != %(p)s, updated_at DESC LIMIT 4",
                    {"p": prefix},
                )
                found = [str(r[0]) for r in await cursor.fetchall()]
        return resolved(prefix, found)

    async def totals(self) -> tuple[int, Usage]:
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens),"
                " 0), coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0)"
                " FROM sessions"
            )
            r = await cursor.fetchone()
        assert r is not None
        return int(r[0]), Usage(
            input_tokens=int(r[1]),
            output_tokens=int(r[2]),
            cache_read_tokens=int(r[3]),
            cache_write_tokens=int(r[4]),
        )

    async def import_session(self, imported: ImportedSession) -> SessionCopied:
        s = imported
        async with self.transaction() as db:
            added = await db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, message_count, owner,"
                " chat) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (
                    *(s.id, s.title[:TITLE_LENGTH], s.created_at, s.updated_at),
                    *(len(s.messages), s.owner, s.chat),
                ),
            )
            if not added.rowcount:
                return SessionCopied(copied=False)
            async with db.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO messages (session_id, role, content, text, words, created_at)"
                    " VALUES (%s, %s, %s, %s, to_tsvector('simple', %s), %s)",
                    [
                        (
                            *(s.id, m.role.value, encode_content(m), m.text),
                            *(" ".join(words_of(m.text, recall=False)), at),
                        )
                        for m, at in s.messages
                    ],
                )
            if s.chat_key is None:
                return SessionCopied(copied=True)
            bound = await db.execute(
                "INSERT INTO chat_sessions (session_key, session_id, updated_at)"
                " VALUES (%s, %s, %s) ON CONFLICT (session_key) DO NOTHING",
                (s.chat_key, s.id, time.time()),
            )
            return SessionCopied(copied=True, bound=bool(bound.rowcount))

    async def delete_session(self, session_id: str) -> bool:
        async with self.transaction() as db:
            cursor = await db.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
            return cursor.rowcount > 0

    async def get_external_session(self, session_id: str, provider: str) -> str | None:
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT external_id FROM external_sessions WHERE session_id = %s AND provider = %s",
                (session_id, provider),
            )
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    async def set_external_session(self, session_id: str, provider: str, external: str) -> None:
        now = time.time()
        async with self.transaction() as db:
            await db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (%s, '', %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (session_id, now, now),
            )
            await db.execute(
                "INSERT INTO external_sessions (session_id, provider, external_id)"
                " VALUES (%s, %s, %s) ON CONFLICT (session_id, provider)"
                " DO UPDATE SET external_id = excluded.external_id",
                (session_id, provider, external),
            )

    async def set_scope(
        self,
        session_id: str,
        *,
        owner: str | None,
        chat: str | None,
        agent: str = DEFAULT_AGENT,
        parent: str | None = None,
    ) -> None:
        async with self.transaction() as db:
            await db.execute(
                "UPDATE sessions SET owner = %s, chat = %s, agent = %s, parent = %s WHERE id = %s",
                (owner, chat, agent, parent, session_id),
            )

    # -- the audit trail -------------------------------------------------------------------

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        async with self.transaction() as db:
            await db.execute(
                "INSERT INTO tool_calls (session_id, tool, input_digest, decision, decided_by,"
                " reason, started_at, duration, outcome)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                tool_call_params(record),
            )

    async def tool_calls(
        self, limit: int = 50, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        where, args = (
            ("WHERE session_id = %s", (session_id, limit)) if session_id else ("", (limit,))
        )
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT session_id, tool, input_digest, decision, decided_by, reason, started_at,"
                f" duration, outcome FROM tool_calls {where} ORDER BY id DESC LIMIT %s",
                args,
            )
            rows = await cursor.fetchall()
        return [tool_call_of(r) for r in rows]

    # -- recall and search -----------------------------------------------------------------

    async def recall(
        self,
        text: str,
        limit: int,
        *,
        exclude: str | None = None,
        scope_of: str | None = None,
        agent: str | None = None,
    ) -> list[Recalled]:
        async with self.transaction() as db:
            scoped = await scope_where(db, exclude=exclude, scope_of=scope_of, agent=agent)
            if scoped is None:
                return []
            where, args = scoped
            counts = {}
            for word in probed(words_of(text, recall=True)):
                cursor = await db.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM messages"
                    " WHERE words @@ to_tsquery('simple', %s) LIMIT %s) found",
                    (f"'{word}'", CANDIDATES + 1),
                )
                counts[word] = (await cursor.fetchone() or (0,))[0]
            query = any_word(rarest(counts))
            if query is None:
                return []
            return await _found(db, query, where, args, limit, ranked=RANKED)

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        match = every_prefix(words_of(query, recall=False)[:16])
        if match is None:
            return []
        async with self.transaction() as db:
            found = await _found(db, match, "", [], limit, ranked=limit * 10)
            cursor = await db.execute(
                "SELECT id, title FROM sessions WHERE id = ANY(%s)",
                ([h.session_id for h in found],),
            )
            titles = dict(await cursor.fetchall())
        return [
            SearchHit(
                session_id=h.session_id,
                title=titles.get(h.session_id, ""),
                role=Role(h.role),
                text=h.snippet,
                created_at=h.created_at,
            )
            for h in found
        ]

    async def aclose(self) -> None:
        if self._urgent is not None:
            await self._urgent.close()
        await self._pool.close()


async def scope_where(
    db: AsyncConnection[Any], *, exclude: str | None, scope_of: str | None, agent: str | None
) -> tuple[str, list[object]] | None:
    """The conditions on sessions `s` that recall keeps to (as recall.scope_where does for
    SQLite), or None when no session passes them (a first conversation: nothing to rank,
    and recall runs on every turn)."""
    where = ""
    args: list[object] = []
    if agent is not None:
        where += " AND s.agent = %s"
        args.append(agent)
    if exclude is not None:
        where += " AND s.id != %s"
        args.append(exclude)
    if scope_of is not None:
        cursor = await db.execute("SELECT owner, chat FROM sessions WHERE id = %s", (scope_of,))
        owner, chat = await cursor.fetchone() or (None, None)
        if owner is None and chat is None:  # the local user's sessions
            where += " AND s.owner IS NULL AND s.chat IS NULL"
        else:
            where += " AND (s.owner = %s OR s.chat = %s)"
            args += [owner, chat]
    if where:
        cursor = await db.execute(f"SELECT 1 FROM sessions s WHERE TRUE {where}", args)
        if await cursor.fetchone() is None:
            return None
    return where, args


async def _found(
    db: AsyncConnection[Any],
    match: str,
    where: str,
    args: list[object],
    limit: int,
    *,
    ranked: int,
) -> list[Recalled]:
    """The best `limit` of the `ranked` best-ranked messages matching `match` (a tsquery)
    whose sessions pass `where`, with a snippet each."""
    cursor = await db.execute(
        "SELECT m.id, m.session_id, m.role, m.created_at, ts_headline('simple', m.text, q, %s)"
        " FROM"
        " (SELECT id, ts_rank(words, q) AS rank FROM messages, to_tsquery('simple', %s) q"
        "  WHERE words @@ q ORDER BY rank DESC, id DESC LIMIT %s) f"
        " JOIN messages m ON m.id = f.id JOIN sessions s ON s.id = m.session_id,"
        " to_tsquery('simple', %s) q"
        f" WHERE TRUE {where} ORDER BY f.rank DESC, f.id DESC LIMIT %s",
        (SNIPPET, match, ranked, match, *args, limit),
    )
    return [
        Recalled(
            session_id=sid, role=role, snippet=" ".join(snip.split()), created_at=at, message_id=i
        )
        for i, sid, role, at, snip in await cursor.fetchall()
    ]
