"""What model calls cost, in the SQLite store (the SpendingStore protocol).

A call is queued on the store's one writer with its day's totals (the agent's and the
person's); a budget check read on the same writer runs after it, so it sees every call made
before it.
"""

from __future__ import annotations

import sqlite3

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
from rousseau.state.store import Store

_INSERT = CHARGE_INSERT.format(p="?")
_UPSERT = SPENDING_UPSERT.format(p="?")
_SPENT = SPENT_SELECT.format(p="?")


class SqliteSpending:
    """The ledger in a Store, through its worker like the rest of its state."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(self, charge: Charge) -> None:
        def op(db: sqlite3.Connection) -> None:
            db.execute(_INSERT, charge_args(charge))
            for person in {ALL_PEOPLE, charge.person}:
                db.execute(_UPSERT, (charge.agent, person, charge.day, charge.tokens, charge.usd))

        await self.store.submit(op)

    async def spending(self, agent: str, person: str, day: str) -> Spending:
        first, last = month_of(day)

        def op(db: sqlite3.Connection) -> Spending:
            return Spending(
                day=spent_of(db.execute(_SPENT, (agent, ALL_PEOPLE, day, day)).fetchone()),
                month=spent_of(db.execute(_SPENT, (agent, ALL_PEOPLE, first, last)).fetchone()),
                person_day=spent_of(db.execute(_SPENT, (agent, person, day, day)).fetchone()),
            )

        return await self.store.call(op)

    async def report(
        self, first: str, last: str, *, agent: str | None = None, person: str | None = None
    ) -> list[SpendingRow]:
        where, args = report_where(agent, person, "?")
        sql = REPORT_SELECT.format(p="?", where=where)

        def op(db: sqlite3.Connection) -> list[SpendingRow]:
            rows = db.execute(sql, (first, last, *args)).fetchall()
            return [SpendingRow(agent=r[0], person=r[1], spent=spent_of(r[2:])) for r in rows]

        return await self.store.call(op)

    async def session_cost(self, session_id: str) -> float:
        def op(db: sqlite3.Connection) -> float:
            row = db.execute(
                "SELECT coalesce(sum(usd), 0) FROM model_calls WHERE session_id = ?", (session_id,)
            ).fetchone()
            return float(row[0])

        return await self.store.call(op)
