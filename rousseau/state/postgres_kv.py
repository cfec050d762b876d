"""A transport's own key-value state (login tokens, sync positions) on PostgreSQL."""

from __future__ import annotations

from rousseau.state.postgres import PostgresStore


class PostgresTransportState:
    """A transport's own key-value state (TransportState) on PostgreSQL."""

    def __init__(self, store: PostgresStore, transport: str) -> None:
        self.store = store
        self.transport = transport

    async def get(self, key: str) -> str | None:
        async with self.store.transaction() as db:
            cursor = await db.execute(
                "SELECT value FROM transport_state WHERE transport = %s AND key = %s",
                (self.transport, key),
            )
            row = await cursor.fetchone()
        return None if row is None or row[0] == "" else str(row[0])

    async def set(self, key: str, value: str) -> None:
        async with self.store.transaction() as db:
            await db.execute(
                "INSERT INTO transport_state (transport, key, value) VALUES (%s, %s, %s)"
                " ON CONFLICT (transport, key) DO UPDATE SET value = excluded.value",
                (self.transport, key, value),
            )
