"""The messages' embeddings in the SQLite store, with sqlite-vec's distance functions.

`message_vectors` keeps each message's vector (float32, its row deleted with the message);
`vector_state` says whose model they are and up to which message they reach, so a backfill
cut off resumes. Nearest neighbours are exact, over the sessions in scope, while the scope
holds at most EXACT messages; past that (one person with a long history) a coarse pass over
the vectors' signs (a vec0 `bit` index, 32 bytes a vector, made when the first vectors
arrive) picks CANDIDATES, which are then ranked exactly. A vec0 float index ranks exactly
too, but reads every vector at each query: 150 ms at 200,000 vectors of 256 dimensions on a
small machine, against 15-25 ms for the two passes.

A turn's search reads on a connection of its own, on a thread of its own: beside the
keyword query (on the store's thread), and never holding up the store's writes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from rousseau.agent import StoreError
from rousseau.state.protocol import Recalled
from rousseau.state.recall import scope_where

if TYPE_CHECKING:
    from rousseau.state.store import Store

T = TypeVar("T")

NEAREST = 500  # PostgreSQL: the closest vectors then filtered by session and scope
EXACT = 20_000  # messages in scope ranked exactly, each of them
CANDIDATES = 64  # past that, what the coarse pass hands to the exact one
SIZES = 1_024  # scopes whose size is remembered
SNIPPET = 240  # characters of a message shown when only its meaning matched


@functools.cache
def enable_sqlite_vec() -> str | None:
    """Make sqlite-vec part of every SQLite connection opened from now on; None, or why it
    cannot be. Python's sqlite3 may be built without `enable_load_extension` (pyenv's and
    others' are), so the extension is registered with SQLite's own sqlite3_auto_extension
    in the library the sqlite3 module uses: no Python API does that."""
    try:
        import sqlite_vec
    except ImportError:
        from rousseau.agent.errors import install_command

        return f"sqlite-vec is not installed: {install_command('embeddings')}"
    try:
        library = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        extension = ctypes.CDLL(f"{sqlite_vec.loadable_path()}{_suffix()}")
        library.sqlite3_auto_extension(ctypes.cast(extension.sqlite3_vec_init, ctypes.c_void_p))
        with sqlite3.connect(":memory:") as probe:
            probe.execute("SELECT vec_version()")
    except (OSError, AttributeError, sqlite3.Error) as exc:
        return f"sqlite-vec could not be loaded into this Python's SQLite: {exc}"
    return None


def _suffix() -> str:
    import sys

    return {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")


class SqliteVectors:
    """A VectorStore in the SQLite store (see the module's note)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._reader: sqlite3.Connection | None = None
        self._reading = anyio.Lock()
        self._sizes: dict[tuple[str, tuple[object, ...]], tuple[bool, float]] = {}

    async def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """`op` on the reading connection (the store's own for an in-memory store)."""
        if self.store.path == ":memory:":
            return await self.store.call(op)
        async with self._reading:
            return await anyio.to_thread.run_sync(self._on_reader, op)

    def _on_reader(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._reader is None:
            from urllib.parse import quote

            self._reader = sqlite3.connect(
                f"file:{quote(self.store.path)}?mode=ro", uri=True, check_same_thread=False
            )
        try:
            return op(self._reader)
        except sqlite3.Error as exc:
            raise StoreError(f"session store: {exc}") from exc

    def _small(self, db: sqlite3.Connection, where: str, args: list[object]) -> bool:
        """Whether the scope holds at most EXACT messages; known for a minute (a person's
        history grows slowly, and asking costs a few milliseconds at each turn)."""
        key = (where, tuple(args))
        now = time.monotonic()
        known = self._sizes.get(key)
        if known is None or now - known[1] > 60:
            (count,) = db.execute(
                "SELECT count(*) FROM (SELECT 1 FROM sessions s"
                f" JOIN messages m ON m.session_id = s.id WHERE 1 {where} LIMIT ?)",
                (*args, EXACT + 1),
            ).fetchone()
            known = self._sizes[key] = (int(count) <= EXACT, now)
            while len(self._sizes) > SIZES:
                self._sizes.pop(next(iter(self._sizes)))
        return known[0]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    async def unavailable(self) -> str | None:
        why = enable_sqlite_vec()
        if why is not None:
            return why
        try:
            await self.store.call(lambda db: db.execute("SELECT vec_version()"))
        except StoreError:  # the store was opened before sqlite-vec was made part of it
            return "sqlite-vec was loaded after the store was opened"
        return None

    async def unembedded(self, model: str, limit: int) -> list[tuple[int, str]]:
        def op(db: sqlite3.Connection) -> list[tuple[int, str]]:
            state = _state(db)
            cursor = state[2] if state is not None and state[0] == model else 0
            rows = db.execute(
                "SELECT id, text FROM messages WHERE id > ? AND text != '' ORDER BY id LIMIT ?",
                (cursor, limit),
            ).fetchall()
            return [(int(i), str(t)) for i, t in rows]

        return await self.store.call(op)

    async def put(self, model: str, vectors: list[tuple[int, list[float]]]) -> None:
        if not vectors:
            return
        from sqlite_vec import serialize_float32

        width = len(vectors[0][1])

        def op(db: sqlite3.Connection) -> None:
            state = _state(db)
            if state is None or state[:2] != (model, width):  # another model: start again
                db.execute("DELETE FROM message_vectors")
                db.execute("DROP TABLE IF EXISTS message_bits")
                if width % 8 == 0:
                    db.execute(
                        "CREATE VIRTUAL TABLE message_bits USING"
                        f" vec0(embedding bit[{width}], chunk_size=4096)"
                    )
                db.execute(
                    "INSERT OR REPLACE INTO vector_state (id, model, dimensions, cursor)"
                    " VALUES (1, ?, ?, 0)",
                    (model, width),
                )
            coarse = width % 8 == 0
            for i, vector in vectors:
                blob = serialize_float32(vector)
                # a message deleted since it was read is skipped; one embedded already (by a
                # reindex beside the daemon) is kept as it is
                added = db.execute(
                    "INSERT OR IGNORE INTO message_vectors (id, vector)"
                    " SELECT ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?)",
                    (i, blob, i),
                ).rowcount
                if added and coarse:
                    _add_bits(db, i, blob)
            db.execute(
                "UPDATE vector_state SET cursor = max(cursor, ?)", (max(i for i, _ in vectors),)
            )

        await self.store.call(op, write=True)

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
        from sqlite_vec import serialize_float32

        def op(db: sqlite3.Connection) -> list[Recalled]:
            state = _state(db)
            if state is None or state[:2] != (model, len(vector)):
                return []
            scoped = scope_where(db, exclude=exclude, scope_of=scope_of, agent=agent)
            if scoped is None:
                return []
            where, args = scoped
            query = serialize_float32(vector)
            if self._small(db, where, args) or len(vector) % 8:
                rows = db.execute(
                    "SELECT m.id, m.session_id, m.role, m.created_at, m.text FROM sessions s"
                    " JOIN messages m ON m.session_id = s.id JOIN message_vectors v ON v.id = m.id"
                    f" WHERE 1 {where} ORDER BY vec_distance_cosine(v.vector, ?) LIMIT ?",
                    (*args, query, limit),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT m.id, m.session_id, m.role, m.created_at, m.text FROM"
                    " (SELECT rowid FROM message_bits"
                    "  WHERE embedding MATCH vec_quantize_binary(?) AND k = ?) c"
                    " JOIN message_vectors v ON v.id = c.rowid JOIN messages m ON m.id = v.id"
                    " JOIN sessions s ON s.id = m.session_id"
                    f" WHERE 1 {where} ORDER BY vec_distance_cosine(v.vector, ?) LIMIT ?",
                    (query, CANDIDATES, *args, query, limit),
                ).fetchall()
            return [
                Recalled(
                    session_id=sid, role=role, snippet=snippet(text), created_at=at, message_id=i
                )
                for i, sid, role, at, text in rows
            ]

        return await self._read(op)

    async def progress(self, model: str) -> tuple[int, int]:
        def op(db: sqlite3.Connection) -> tuple[int, int]:
            (total,) = db.execute("SELECT count(*) FROM messages WHERE text != ''").fetchone()
            state = _state(db)
            if state is None or state[0] != model:
                return 0, int(total)
            (done,) = db.execute(
                "SELECT count(*) FROM messages WHERE id <= ? AND text != ''", (state[2],)
            ).fetchone()
            return int(done), int(total)

        return await self.store.call(op)

    async def prune(self) -> int:
        """The vectors go with their messages; their coarse index's entries are swept here."""

        def op(db: sqlite3.Connection) -> int:
            state = _state(db)
            if state is None or state[1] % 8:
                return 0
            gone = db.execute(
                "SELECT rowid FROM message_bits WHERE rowid NOT IN (SELECT id FROM message_vectors)"
            ).fetchall()
            db.executemany("DELETE FROM message_bits WHERE rowid = ?", gone)
            return len(gone)

        return await self.store.call(op, write=True)


def _add_bits(db: sqlite3.Connection, message_id: int, blob: bytes) -> None:
    insert = "INSERT INTO message_bits (rowid, embedding) VALUES (?, vec_quantize_binary(?))"
    try:
        db.execute(insert, (message_id, blob))
    except sqlite3.IntegrityError:  # the id of a deleted message, taken again, not yet swept
        db.execute("DELETE FROM message_bits WHERE rowid = ?", (message_id,))
        db.execute(insert, (message_id, blob))


def _state(db: sqlite3.Connection) -> tuple[str, int, int] | None:
    """(model, dimensions, cursor) of the vectors kept, if any are."""
    row = db.execute("SELECT model, dimensions, cursor FROM vector_state").fetchone()
    return None if row is None else (str(row[0]), int(row[1]), int(row[2]))


def snippet(text: str) -> str:
    """A message as recall shows it when only its meaning matched: its start."""
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET else flat[:SNIPPET].rsplit(" ", 1)[0] + " …"
