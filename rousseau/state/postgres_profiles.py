"""People's profiles on PostgreSQL (the ProfileStore protocol).

Daemons sharing the database may write to one profile at once (the same person in two
chats): a write holds a transaction-scoped advisory lock on its profile while it reads the
profile's size and writes, so the bound holds across the cluster.
"""

from __future__ import annotations

import time
from typing import Any

from rousseau.state.postgres import PostgresStore
from rousseau.state.records import (
    PROFILE_COLUMNS,
    ProfileEntry,
    ProfileWrite,
    over_bound,
    profile_entry_of,
)


async def _held(db: Any, agent: str, person: str) -> int:
    """Lock the profile for this transaction; the characters it holds."""
    await db.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"profile:{agent}:{person}",)
    )
    cursor = await db.execute(
        "SELECT coalesce(sum(length(text)), 0) FROM profile_entries"
        " WHERE agent = %s AND person = %s",
        (agent, person),
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


class PostgresProfiles:
    """Profiles on a PostgresStore, each call its own transaction."""

    def __init__(self, store: PostgresStore) -> None:
        self.pg = store

    async def entries(
        self, *, agent: str | None = None, person: str | None = None
    ) -> list[ProfileEntry]:
        where, args = "", []
        for column, value in (("agent", agent), ("person", person)):
            if value is not None:
                where += f" AND {column} = %s"
                args.append(value)
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                f"SELECT {PROFILE_COLUMNS} FROM profile_entries WHERE TRUE{where}"
                " ORDER BY agent, person, id",
                args,
            )
            rows = await cursor.fetchall()
        return [profile_entry_of(r) for r in rows]

    async def add_entry(
        self, agent: str, person: str, text: str, *, max_chars: int
    ) -> ProfileWrite:
        now = time.time()
        async with self.pg.transaction() as db:
            if over_bound(await _held(db, agent, person), 0, len(text), max_chars):
                return "full"
            await db.execute(
                "INSERT INTO profile_entries (agent, person, text, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s)",
                (agent, person, text, now, now),
            )
        return "done"

    async def replace_entry(
        self, agent: str, person: str, entry_id: int, text: str, *, max_chars: int
    ) -> ProfileWrite:
        now = time.time()
        async with self.pg.transaction() as db:
            used = await _held(db, agent, person)
            cursor = await db.execute(
                "SELECT length(text) FROM profile_entries WHERE id = %s AND agent = %s"
                " AND person = %s",
                (entry_id, agent, person),
            )
            row = await cursor.fetchone()
            if row is None:
                return "gone"
            if over_bound(used, int(row[0]), len(text), max_chars):
                return "full"
            await db.execute(
                "UPDATE profile_entries SET text = %s, updated_at = %s WHERE id = %s",
                (text, now, entry_id),
            )
        return "done"

    async def remove_entry(
        self, entry_id: int, *, agent: str | None = None, person: str | None = None
    ) -> ProfileEntry | None:
        where = ""
        args: list[object] = [entry_id]
        for column, value in (("agent", agent), ("person", person)):
            if value is not None:
                where += f" AND {column} = %s"
                args.append(value)
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                f"DELETE FROM profile_entries WHERE id = %s{where} RETURNING {PROFILE_COLUMNS}",
                args,
            )
            row = await cursor.fetchone()
        return None if row is None else profile_entry_of(row)
