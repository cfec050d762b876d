"""What the spending looks like to a person: /usage in chat, `rousseau usage` and the
dashboard say it with these."""

from __future__ import annotations

from typing import Any

from rousseau.costs.meter import Meter
from rousseau.state.records import ALL_PEOPLE, SpendingRow, Spent, month_of

PEOPLE_SHOWN = 200
"""The most people the Usage page lists (the costliest first)."""


def money(usd: float) -> str:
    """Dollars as people read them: cents, or finer under a cent."""
    if usd and usd < 0.01:
        return "$" + f"{usd:.6f}".rstrip("0")
    return f"${usd:,.2f}"


def spent_line(spent: Spent) -> str:
    return f"{money(spent.usd)} ({spent.tokens:,} tokens, {spent.calls:,} model calls)"


async def usage_lines(meter: Meter, agent: str, person: str | None) -> str:
    """The agent's day and month, the person's (where given) and the limits that hold."""
    day = meter.today()
    first, last = month_of(day)
    agent_spending = await meter.spending.spending(agent, person or "", day)
    lines = [
        f"Agent {agent}:",
        f"  today: {spent_line(agent_spending.day)}",
        f"  this month: {spent_line(agent_spending.month)}",
    ]
    if person:
        mine = await meter.spending.report(first, last, agent=agent, person=person)
        month = mine[0].spent if mine else Spent()
        lines += [
            "You:",
            f"  today: {spent_line(agent_spending.person_day)}",
            f"  this month: {spent_line(month)}",
        ]
    budget = meter.budgets.get(agent)
    if budget is not None:
        limits = [
            f"{money(budget.daily_usd)} a day" if budget.daily_usd is not None else "",
            f"{money(budget.monthly_usd)} a month" if budget.monthly_usd is not None else "",
            f"{budget.daily_tokens:,} tokens a day" if budget.daily_tokens is not None else "",
            f"{money(budget.per_sender_daily_usd)} a day per person"
            if budget.per_sender_daily_usd is not None
            else "",
        ]
        lines.append("Limits: " + ", ".join(x for x in limits if x) + ".")
    return "\n".join(lines)


def spent_of(rows: list[SpendingRow], agent: str, person: str = ALL_PEOPLE) -> Spent:
    """One agent's (and person's, or ALL_PEOPLE) spending among a report's rows."""
    return next((r.spent for r in rows if (r.agent, r.person) == (agent, person)), Spent())


async def spending_page(meter: Meter | None) -> dict[str, Any] | None:
    """What the dashboard's Usage page shows of the money: today and this month, by agent
    (with its limits) and by person; None where nothing is metered."""
    if meter is None:
        return None
    day = meter.today()
    today = await meter.spending.report(day, day)
    month = await meter.spending.report(*month_of(day))

    def total(rows: list[SpendingRow]) -> float:
        return sum(r.spent.usd for r in rows if r.person == ALL_PEOPLE)

    agents = sorted({r.agent for r in month if r.person == ALL_PEOPLE} | set(meter.budgets))
    return {
        "day": day,
        "today": money(total(today)),
        "month": money(total(month)),
        "agents": [
            {
                "name": agent,
                "today": spent_of(today, agent),
                "month": spent_of(month, agent),
                "budget": meter.budgets.get(agent),
            }
            for agent in agents
        ],
        "people": [
            {
                "agent": r.agent,
                "person": r.person or "(nobody)",
                "month": r.spent,
                "today": spent_of(today, r.agent, r.person),
            }
            for r in month
            if r.person != ALL_PEOPLE
        ][:PEOPLE_SHOWN],
        "money": money,
    }
