"""What the spending looks like to a person: /usage in chat, `rousseau usage` and the
dashboard say it with these."""

from __future__ import annotations

from rousseau.costs.meter import Meter
from rousseau.state.records import Spent, month_of


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
