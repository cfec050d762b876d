"""`rousseau usage`: what the models cost, today and this month, by agent and by person, with
the limits of `agent.budget` (the same figures as /usage in chat and the dashboard)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rousseau.cli.common import load, with_state

if TYPE_CHECKING:
    from rousseau.config.sections import BudgetConfig
    from rousseau.state.backend import Backend
    from rousseau.state.records import SpendingRow, Spent


@dataclass(frozen=True, slots=True)
class Figures:
    day: str
    today: list[SpendingRow]
    month: list[SpendingRow]
    budgets: dict[str, BudgetConfig]

    def of(self, agent: str, person: str, *, month: bool = False) -> Spent:
        from rousseau.costs.report import spent_of

        return spent_of(self.month if month else self.today, agent, person)


def usage(args: argparse.Namespace) -> int:
    from rousseau.assembly.models import build_meter
    from rousseau.state.records import ALL_PEOPLE, month_of

    config = load(args)

    async def read(backend: Backend) -> Figures:
        assert backend.spending is not None
        meter = build_meter(config, backend.spending)
        day = args.day or meter.today()
        first, last = month_of(day)
        return Figures(
            day=day,
            today=await backend.spending.report(day, day, agent=args.agent),
            month=await backend.spending.report(first, last, agent=args.agent),
            budgets=dict(meter.budgets),
        )

    figures = with_state(config, read)
    if args.json:
        rows = {"today": figures.today, "month": figures.month}
        print(
            json.dumps(
                {"day": figures.day, **{k: [_row(r) for r in v] for k, v in rows.items()}},
                indent=2,
            )
        )
        return 0
    agents = {r.agent for r in figures.month if r.person == ALL_PEOPLE} | set(figures.budgets)
    if args.agent is not None:
        agents = {args.agent}
    if not agents:
        print(f"no model calls recorded in {figures.day[:7]}")
        return 0
    print("\n\n".join("\n".join(_agent(figures, a, args.limit)) for a in sorted(agents)))
    return 0


def _agent(figures: Figures, agent: str, limit: int) -> list[str]:
    """An agent's paragraph: its day and month, its limits, and its people."""
    from rousseau.costs.report import money, spent_line
    from rousseau.state.records import ALL_PEOPLE

    day = figures.day
    today = figures.of(agent, ALL_PEOPLE)
    month = figures.of(agent, ALL_PEOPLE, month=True)
    lines = [
        f"agent {agent}",
        f"  today ({day}): {spent_line(today)}",
        f"  this month ({day[:7]}): {spent_line(month)}",
    ]
    budget = figures.budgets.get(agent)
    if budget is not None:
        for name, cap, spent in (
            ("daily limit", budget.daily_usd, today.usd),
            ("monthly limit", budget.monthly_usd, month.usd),
            ("per person a day", budget.per_sender_daily_usd, None),
        ):
            if cap is not None:
                left = "" if spent is None else ", " + _left(cap, spent)
                lines.append(f"  {name}: {money(cap)}{left}")
        if budget.daily_tokens is not None:
            left_tokens = max(0, budget.daily_tokens - today.tokens)
            lines.append(f"  daily tokens: {budget.daily_tokens:,}, {left_tokens:,} left")
    people = [r for r in figures.month if r.agent == agent and r.person != ALL_PEOPLE]
    if people:
        lines.append("  by person, this month (today):")
    for row in people[:limit]:
        who = row.person or "(nobody: cron, heartbeats, the terminal)"
        spent_today = money(figures.of(agent, row.person).usd)
        lines.append(
            f"    {who}: {money(row.spent.usd)} ({spent_today}), {row.spent.tokens:,} tokens"
        )
    return lines


def _left(limit: float, spent: float) -> str:
    from rousseau.costs.report import money

    return "reached" if spent >= limit else f"{money(limit - spent)} left"


def _row(row: SpendingRow) -> dict[str, object]:
    return {
        "agent": row.agent,
        "person": row.person,
        "usd": round(row.spent.usd, 6),
        "tokens": row.spent.tokens,
        "calls": row.spent.calls,
    }
