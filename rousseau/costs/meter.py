"""The meter: every model call is checked against its agent's budget before it is made and
recorded with its cost after (DESIGN.md section 9, `agent.budget`).

Who pays is the task's `Payer` (a context variable): the router sets it for a person's turn,
cron and the heartbeat for theirs; a sub-agent's turn runs in its parent's task, so its
calls are charged where its parent's are. `Metered` wraps a provider: whatever calls it (a
turn between its iterations, a compaction, a memory flush, a sub-agent) is checked and
recorded, with nothing to remember at the call site.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

import anyio
import structlog

from rousseau.agent import (
    BudgetExceededError,
    Provider,
    Request,
    Response,
    StreamEvent,
    StreamEventKind,
    Usage,
    streams,
)
from rousseau.costs.prices import Prices
from rousseau.messages import DEFAULT_AGENT, turn_person
from rousseau.state.records import Charge, Spending, Spent

if TYPE_CHECKING:
    from rousseau.config.sections import BudgetConfig
    from rousseau.media import Transcribes
    from rousseau.messages import Inbound, KeyValue
    from rousseau.metrics import Metrics
    from rousseau.state.protocol import SpendingStore

log = structlog.get_logger("rousseau.costs")


@dataclass(frozen=True, kw_only=True, slots=True)
class Payer:
    """Whom a model call is charged to."""

    agent: str = DEFAULT_AGENT
    person: str = ""
    """`transport:sender`; empty for work nobody asked for (cron, heartbeats)."""
    session_id: str = ""
    """The session charged (empty: the request's own)."""
    job: str = "turn"

    @classmethod
    def of(cls, inbound: Inbound, session_id: str) -> Payer:
        """The person who sent `inbound`, to this agent, in this session."""
        person = f"{inbound.transport}:{inbound.sender_id}"
        return cls(agent=inbound.agent, person=person, session_id=session_id)


BUDGET_REPLY = (
    "I've reached my spending limit for now, so I can't answer until it resets. The owner"
    " has been told."
)
SENDER_BUDGET_REPLY = (
    "You've reached today's spending limit for your messages, so I can't answer until tomorrow."
)


def refusal(error: BudgetExceededError) -> str:
    """What the person whose message a limit stopped is told."""
    return SENDER_BUDGET_REPLY if error.limit == "per_sender_daily_usd" else BUDGET_REPLY


paying: ContextVar[Payer | None] = ContextVar("paying", default=None)
"""Who pays for the model calls this task makes (None: the calling agent, for nobody)."""


Notify = Callable[[str, str, str], Awaitable[object]]
"""notify(transport, chat, text): queue a message for an owner."""


class Meter:
    """Checks budgets before model calls and records what each call cost."""

    def __init__(
        self,
        spending: SpendingStore,
        *,
        prices: Prices,
        budgets: Mapping[str, BudgetConfig],
        zone: tzinfo,
        owners: Mapping[str, list[str]] | None = None,
        notify: Notify | None = None,
        told: KeyValue | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        remember: float = 0.0,
    ) -> None:
        self.spending = spending
        self.prices = prices
        self.budgets = {name: b for name, b in budgets.items() if _limits(b)}
        """The agents with at least one limit (the others are only recorded)."""
        self.zone = zone
        self.owners = owners or {}
        """Whom to tell, per agent, when its budget is reached (`transport:chat`)."""
        self.notify = notify
        self.alert: Callable[[str, list[str]], Awaitable[None]] | None = None
        """Where a budget reached is told besides its owners (the daemon's alerts)."""
        self.told = told
        """Where the days the owners were told are kept (once a day, across restarts)."""
        self.metrics = metrics
        self.clock = clock
        self.remember = remember
        """Seconds a spending read is trusted, this meter's own calls added to it (0: read at
        every check). Only where no other process spends: one daemon on its SQLite file."""
        self._agents: dict[tuple[str, str], tuple[float, Spent, Spent]] = {}
        """(agent, day) -> when read, the day's and the month's spending."""
        self._people: dict[tuple[str, str, str], tuple[float, Spent]] = {}
        """(agent, person, day) -> when read, the person's day."""

    def today(self) -> str:
        """The day budgets count in now, in the configured zone: `YYYY-MM-DD`."""
        return datetime.fromtimestamp(self.clock(), self.zone).strftime("%Y-%m-%d")

    async def check(self, payer: Payer) -> None:
        """Raise BudgetExceededError if one of the payer's limits is reached."""
        budget = self.budgets.get(payer.agent)
        if budget is None:
            return
        day = self.today()
        spent = self._remembered(payer, day)
        if spent is None:
            spent = await self.spending.spending(payer.agent, payer.person, day)
            self._remember(payer, day, spent)
        reached = _reached(budget, spent, payer.person)
        if reached is None:
            return
        limit, detail = reached
        if self.metrics is not None:
            self.metrics.budget_refusals.labels(payer.agent, limit).inc()
        log.warning("costs.budget_reached", agent=payer.agent, limit=limit, job=payer.job)
        if limit != "per_sender_daily_usd":  # one person's limit is theirs, not the owner's
            await self._tell_owners(payer.agent, limit, detail, day)
        raise BudgetExceededError(limit, detail)

    async def record(
        self, payer: Payer, session_id: str, model: str, usage: Usage, provider: str = ""
    ) -> float:
        """Keep one call's cost; what it was, in USD."""
        usd = self.prices.cost(model, usage, provider)
        charge = Charge(
            at=self.clock(),
            day=self.today(),
            agent=payer.agent,
            person=payer.person,
            session_id=payer.session_id or session_id,
            job=payer.job,
            model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            usd=usd,
        )
        await self._keep(charge)
        return usd

    def _remembered(self, payer: Payer, day: str) -> Spending | None:
        """The spending as last read and since added to, while it may still be trusted."""
        if not self.remember:
            return None
        totals = self._agents.get((payer.agent, day))
        person = self._people.get((payer.agent, payer.person, day))
        horizon = self.clock() - self.remember
        if totals is None or person is None or min(totals[0], person[0]) < horizon:
            return None
        return Spending(day=totals[1], month=totals[2], person_day=person[1])

    def _remember(self, payer: Payer, day: str, spent: Spending) -> None:
        if not self.remember:
            return
        if len(self._people) > REMEMBERED:  # bounded: a new day, or very many people
            self._agents.clear()
            self._people.clear()
        now = self.clock()
        self._agents[payer.agent, day] = (now, spent.day, spent.month)
        self._people[payer.agent, payer.person, day] = (now, spent.person_day)

    def _add(self, charge: Charge) -> None:
        """A call this meter recorded, added to what it remembers."""
        totals = self._agents.get((charge.agent, charge.day))
        if totals is not None:
            at, day, month = totals
            self._agents[charge.agent, charge.day] = (at, _plus(day, charge), _plus(month, charge))
        person = self._people.get((charge.agent, charge.person, charge.day))
        if person is not None:
            self._people[charge.agent, charge.person, charge.day] = (
                person[0],
                _plus(person[1], charge),
            )

    async def charge(self, payer: Payer, *, model: str, usd: float, job: str) -> None:
        """Keep the cost of a call that is not a model's (speech), as the payer's."""
        charge = Charge(
            at=self.clock(),
            day=self.today(),
            agent=payer.agent,
            person=payer.person,
            session_id=payer.session_id,
            job=job,
            model=model,
            usd=usd,
        )
        await self._keep(charge)

    async def _keep(self, charge: Charge) -> None:
        """A call's cost into the ledger, what this meter remembers, and the metrics."""
        await self.spending.record(charge)
        self._add(charge)
        if self.metrics is not None and charge.usd:
            self.metrics.cost_usd.labels(charge.agent).inc(charge.usd)

    async def _tell_owners(self, agent: str, limit: str, detail: str, day: str) -> None:
        """Once a day per agent and limit: the owners hear that it stopped, and why."""
        key = f"budget.told:{agent}:{limit}"
        if self.told is not None and await self.told.get(key) == day:
            return
        if self.told is not None:
            await self.told.set(key, day)
        text = (
            f"Budget reached for agent {agent}: {detail}. No model is called for it until the"
            " limit resets; raise it under agent.budget to go on sooner (`rousseau usage`"
            " shows the spending)."
        )
        owners = self.owners.get(agent) or self.owners.get(DEFAULT_AGENT) or []
        if self.alert is not None:  # (not twice in an owner's chat)
            await self.alert(text, owners)
        if not owners or self.notify is None:
            log.warning("costs.no_owner_to_tell", agent=agent, limit=limit)
            return
        for owner in owners:
            transport, _, chat = owner.partition(":")
            try:
                await self.notify(transport, chat, text)
            except Exception as exc:
                log.warning("costs.notice_failed", owner=owner, error=str(exc))


REMEMBERED = 10_000
"""People whose spending a meter remembers at most (then it reads again)."""


def _plus(spent: Spent, charge: Charge) -> Spent:
    return Spent(
        usd=spent.usd + charge.usd, tokens=spent.tokens + charge.tokens, calls=spent.calls + 1
    )


def _limits(budget: BudgetConfig) -> bool:
    return any(
        v is not None
        for v in (
            budget.daily_usd,
            budget.monthly_usd,
            budget.daily_tokens,
            budget.per_sender_daily_usd,
        )
    )


def _reached(budget: BudgetConfig, spent: Spending, person: str) -> tuple[str, str] | None:
    """The first limit reached, with a line saying so; None when none is."""
    if budget.daily_usd is not None and spent.day.usd >= budget.daily_usd:
        return "daily_usd", f"${spent.day.usd:.2f} spent today of ${budget.daily_usd:.2f}"
    if budget.monthly_usd is not None and spent.month.usd >= budget.monthly_usd:
        return (
            "monthly_usd",
            f"${spent.month.usd:.2f} spent this month of ${budget.monthly_usd:.2f}",
        )
    if budget.daily_tokens is not None and spent.day.tokens >= budget.daily_tokens:
        return "daily_tokens", f"{spent.day.tokens:,} tokens today of {budget.daily_tokens:,}"
    limit = budget.per_sender_daily_usd
    if person and limit is not None and spent.person_day.usd >= limit:
        return (
            "per_sender_daily_usd",
            f"${spent.person_day.usd:.2f} spent today for {person} of ${limit:.2f}",
        )
    return None


class Metered:
    """A provider whose every call is checked against the budget first and recorded after.

    `agent` and `job` say whom a call is charged to where the task names no payer, and
    `job` what the call is for where the payer's is the plain turn's (a compaction, a
    vision call, a sub-agent's)."""

    def __init__(
        self, provider: Provider, meter: Meter, *, agent: str = DEFAULT_AGENT, job: str = "turn"
    ) -> None:
        self.provider = provider
        self.meter = meter
        self.name = provider.name
        self.agent = agent
        self.job = job

    @property
    def model(self) -> str:
        return str(getattr(self.provider, "model", "") or self.name)

    def _payer(self) -> Payer:
        payer = paying.get()
        if payer is None:  # a turn no router runs: the terminal's person, or nobody's
            return Payer(agent=self.agent, person=turn_person.get() or "", job=self.job)
        return payer if self.job == "turn" else replace(payer, job=self.job)

    async def complete(self, request: Request) -> Response:
        payer = self._payer()
        await self.meter.check(payer)
        response = await self.provider.complete(request)
        await self._record(payer, request, response.usage)
        return response

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        payer = self._payer()
        await self.meter.check(payer)
        if not streams(self.provider):
            response = await self.provider.complete(request)
            await self._record(payer, request, response.usage)
            if response.message.text:
                yield StreamEvent.text_delta(response.message.text)
            yield StreamEvent.final(response)
            return
        async with aclosing(self.provider.stream(request)) as events:
            async for event in events:
                if event.kind is StreamEventKind.RESPONSE and event.response is not None:
                    await self._record(payer, request, event.response.usage)
                yield event

    async def _record(self, payer: Payer, request: Request, usage: Usage) -> None:
        # Shielded: a call that was made is paid for, even when its turn is being stopped.
        with anyio.CancelScope(shield=True):
            try:
                await self.meter.record(payer, request.session_id, self.model, usage, self.name)
            except Exception as exc:  # never lose the answer over its bookkeeping
                log.error("costs.record_failed", error=str(exc), agent=payer.agent)

    async def aclose(self) -> None:
        closer = getattr(self.provider, "aclose", None)
        if closer is not None:
            await closer()


class Budgeted:
    """A transcriber that asks the budget first (of the default agent: a voice note is
    transcribed as it arrives, before any route names the agent that will answer it)."""

    def __init__(self, transcriber: Transcribes, meter: Meter) -> None:
        self.transcriber = transcriber
        self.meter = meter

    async def transcribe(self, data: bytes, *, name: str, media_type: str) -> str:
        await self.meter.check(Payer(job="transcription"))
        return await self.transcriber.transcribe(data, name=name, media_type=media_type)

    async def aclose(self) -> None:
        closer = getattr(self.transcriber, "aclose", None)
        if closer is not None:
            await closer()
