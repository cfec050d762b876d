"""The messages' embeddings on PostgreSQL, with pgvector: `message_vectors` (made when the
first vectors arrive, their width fixed then) with an HNSW index on cosine distance; a
deleted message takes its vector with it. A server without the extension keeps keyword
recall: `unavailable` says why.

Vectors travel as pgvector's text form ('[0.1,0.2]'), so no client package is needed.
"""

from __future__ import annotations

from typing import Any

from rousseau.agent import StoreError
from rousseau.state.postgres import PostgresStore, scope_where
from rousseau.state.protocol import Recalled
from rousseau.state.sqlite_vectors import NEAREST, snippet


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


async def _state(db: Any) -> tuple[str, int, int] | None:
    cursor = await db.execute("SELECT model, dimensions, cursor FROM vector_state")
    row = await cursor.fetchone()
    return None if row is None else (str(row[0]), int(row[1]), int(row[2]))


class PostgresVectors:
    """A VectorStore on a PostgresStore (see the module's note)."""

    def __init__(self, store: PostgresStore) -> None:
        self.pg = store

    async def unavailable(self) -> str | None:
        try:
            async with self.pg.transaction() as db:
                cursor = await db.execute(
                    "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
                )
                if await cursor.fetchone() is None:
                    return "the PostgreSQL server has no pgvector extension"
                await db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except StoreError as exc:
            return f"pgvector could not be enabled: {exc}"
        return None

    async def unembedded(self, model: str, limit: int) -> list[tuple[int, str]]:
        async with self.pg.transaction() as db:
            state = await _state(db)
            cursor = state[2] if state is not None and state[0] == model else 0
            found = await db.execute(
                "SELECT id, text FROM messages WHERE id > %s AND text != '' ORDER BY id LIMIT %s",
                (cursor, limit),
            )
            return [(int(i), str(t)) for i, t in await found.fetchall()]

    async def put(self, model: str, vectors: list[tuple[int, list[float]]]) -> None:
        if not vectors:
            return
        width = len(vectors[0][1])
        async with self.pg.transaction() as db:
            # one writer of the table's shape at a time across the daemons sharing it
            await db.execute("SELECT pg_advisory_xact_lock(hashtextextended('vectors', 0))")
            state = await _state(db)
            if state is None or state[:2] != (model, width):  # another model: start again
                await db.execute("DROP TABLE IF EXISTS message_vectors")
                await db.execute(
                    "CREATE TABLE message_vectors ("
                    " id BIGINT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,"
                    f" embedding vector({width}) NOT NULL)"
                )
                await db.execute(
                    "CREATE INDEX message_vectors_near ON message_vectors"
                    " USING hnsw (embedding vector_cosine_ops)"
                )
                await db.execute(
                    "INSERT INTO vector_state (id, model, dimensions, cursor)"
                    " VALUES (1, %s, %s, 0) ON CONFLICT (id) DO UPDATE"
                    " SET model = excluded.model, dimensions = excluded.dimensions, cursor = 0",
                    (model, width),
                )
            async with db.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO message_vectors (id, embedding)"
                    " SELECT %s, %s::vector WHERE EXISTS (SELECT 1 FROM messages WHERE id = %s)"
                    " ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding",
                    [(i, _literal(v), i) for i, v in vectors],
                )
            await db.execute(
                "UPDATE vector_state SET cursor = greatest(cursor, %s)",
                (max(i for i, _ in vectors),),
            )

    async def nearest(
        self,
        model: str,
        vector: list[float],
        limit: int,
        *,
        exclude: str | None = None,
        scope_of: str | None = None,
        agent: str | None = None,
    ) -> list[Recalled]:
        async with self.pg.transaction() as db:
            state = await _state(db)
            if state is None or state[:2] != (model, len(vector)):
                return []
            scoped = await scope_where(db, exclude=exclude, scope_of=scope_of, agent=agent)
            if scoped is None:
                return []
            where, args = scoped
            # the index's search list bounds how many neighbours it yields (40 by default)
            await db.execute(f"SET LOCAL hnsw.ef_search = {NEAREST}")
            cursor = await db.execute(
                "SELECT m.id, m.session_id, m.role, m.created_at, m.text FROM"
                " (SELECT id, embedding <=> %s::vector AS distance FROM message_vectors"
                "  ORDER BY distance LIMIT %s) v"
                " JOIN messages m ON m.id = v.id JOIN sessions s ON s.id = m.session_id"
                f" WHERE TRUE {where} ORDER BY v.distance LIMIT %s",
                (_literal(vector), NEAREST, *args, limit),
            )
            rows = await cursor.fetchall()
        return [
            Recalled(session_id=sid, role=role, snippet=snippet(text), created_at=at, message_id=i)
            for i, sid, role, at, text in rows
        ]

    async def progress(self, model: str) -> tuple[int, int]:
        async with self.pg.transaction() as db:
            cursor = await db.execute("SELECT count(*) FROM messages WHERE text != ''")
            total = int((await cursor.fetchone() or (0,))[0])
            state = await _state(db)
            if state is None or state[0] != model:
                return 0, total
            cursor = await db.execute(
                "SELECT count(*) FROM messages WHERE id <= %s AND text != ''", (state[2],)
            )
            return int((await cursor.fetchone() or (0,))[0]), total

    async def prune(self) -> int:
        return 0  # a deleted message's vector goes with it (ON DELETE CASCADE)
