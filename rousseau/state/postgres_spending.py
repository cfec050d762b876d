"""What model calls cost, on PostgreSQL (the SpendingStore protocol).

Each call is one transaction: its row and its day's totals (the agent's and the person's),
added in place by an upsert, so daemons sharing the database never lose each other's
spending and every budget check reads the cluster's.
"""

from __future__ import annotations

from rousseau.state.postgres import PostgresStore
from rousseau.state.records import (
    ALL_PEOPLE,
    CHARGE_INSERT,
    REPORT_SELECT,
    SPENDING_UPSERT,
    SPENT_SELECT,
    Charge,
    Spending,
    SpendingRow,
    charge_args,
    month_of,
    report_where,
    spent_of,
)

_INSERT = CHARGE_INSERT.format(p="%s")
_UPSERT = SPENDING_UPSERT.format(p="%s")
_SPENT = SPENT_SELECT.format(p="%s")


class PostgresSpending:
    """The ledger on a PostgresStore, each call its own transaction."""

    def __init__(self, store: PostgresStore) -> None:
        self.pg = store

    async def record(self, charge: Charge) -> None:
        async with self.pg.transaction() as db:
            await db.execute(_INSERT, charge_args(charge))
            # In a fixed order: two daemons adding to the same rows never deadlock.
            for person in sorted({ALL_PEOPLE, charge.person}):
                await db.execute(
                    _UPSERT, (charge.agent, person, charge.day, charge.tokens, charge.usd)
                )

    async def spending(self, agent: str, person: str, day: str) -> Spending:
        first, last = month_of(day)
        async with self.pg.transaction() as db:
            found = []
            for args in (
                (agent, ALL_PEOPLE, day, day),
                (agent, ALL_PEOPLE, first, last),
                (agent, person, day, day),
            ):
                cursor = await db.execute(_SPENT, args)
                found.append(spent_of(await cursor.fetchone()))
        return Spending(day=found[0], month=found[1], person_day=found[2])

    async def report(
        self, first: str, last: str, *, agent: str | None = None, person: str | None = None
    ) -> list[SpendingRow]:
        where, args = report_where(agent, person, "%s")
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                REPORT_SELECT.format(p="%s", where=where), (first, last, *args)
            )
            rows = await cursor.fetchall()
        return [SpendingRow(agent=r[0], person=r[1], spent=spent_of(r[2:])) for r in rows]

    async def session_cost(self, session_id: str) -> float:
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                "SELECT coalesce(sum(usd), 0) FROM model_calls WHERE session_id = %s",
                (session_id,),
            )
            row = await cursor.fetchone()
        return float(row[0]) if row else 0.0
