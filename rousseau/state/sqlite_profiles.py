"""People's profiles in the SQLite store (the ProfileStore protocol).

Every write runs on the store's one writer, so reading a profile's size and writing to it
in the same operation is enough to keep it under its bound.
"""

from __future__ import annotations

import sqlite3
import time

from rousseau.state.records import (
    PROFILE_COLUMNS,
    ProfileEntry,
    ProfileWrite,
    over_bound,
    profile_entry_of,
)
from rousseau.state.store import Store


def _used(db: sqlite3.Connection, agent: str, person: str) -> int:
    row = db.execute(
        "SELECT coalesce(sum(length(text)), 0) FROM profile_entries WHERE agent = ? AND person = ?",
        (agent, person),
    ).fetchone()
    return int(row[0])


class SqliteProfiles:
    """Profiles in a Store, through its worker like the rest of its state."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def entries(
        self, *, agent: str | None = None, person: str | None = None
    ) -> list[ProfileEntry]:
        where, args = "", []
        for column, value in (("agent", agent), ("person", person)):
            if value is not None:
                where += f" AND {column} = ?"
                args.append(value)

        def op(db: sqlite3.Connection) -> list[ProfileEntry]:
            rows = db.execute(
                f"SELECT {PROFILE_COLUMNS} FROM profile_entries WHERE 1{where}"
                " ORDER BY agent, person, id",
                args,
            )
            return [profile_entry_of(r) for r in rows]

        return await self.store.call(op)

    async def add_entry(
        self, agent: str, person: str, text: str, *, max_chars: int
    ) -> ProfileWrite:
        now = time.time()

        def op(db: sqlite3.Connection) -> ProfileWrite:
            if over_bound(_used(db, agent, person), 0, len(text), max_chars):
                return "full"
            db.execute(
                "INSERT INTO profile_entries (agent, person, text, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (agent, person, text, now, now),
            )
            return "done"

        return await self.store.call(op, write=True)

    async def replace_entry(
        self, agent: str, person: str, entry_id: int, text: str, *, max_chars: int
    ) -> ProfileWrite:
        now = time.time()

        def op(db: sqlite3.Connection) -> ProfileWrite:
            row = db.execute(
                "SELECT length(text) FROM profile_entries WHERE id = ? AND agent = ?"
                " AND person = ?",
                (entry_id, agent, person),
            ).fetchone()
            if row is None:
                return "gone"
            if over_bound(_used(db, agent, person), int(row[0]), len(text), max_chars):
                return "full"
            db.execute(
                "UPDATE profile_entries SET text = ?, updated_at = ? WHERE id = ?",
                (text, now, entry_id),
            )
            return "done"

        return await self.store.call(op, write=True)

    async def remove_entry(
        self, entry_id: int, *, agent: str | None = None, person: str | None = None
    ) -> ProfileEntry | None:
        def op(db: sqlite3.Connection) -> ProfileEntry | None:
            row = db.execute(
                f"SELECT {PROFILE_COLUMNS} FROM profile_entries WHERE id = ?", (entry_id,)
            ).fetchone()
            if row is None:
                return None
            entry = profile_entry_of(row)
            if agent not in (None, entry.agent) or person not in (None, entry.person):
                return None
            db.execute("DELETE FROM profile_entries WHERE id = ?", (entry_id,))
            return entry

        return await self.store.call(op, write=True)
