"""The models an agent's work runs on: its own for turns, and those `agent.models` names for
background work (compaction, vision, heartbeat, cron, delegation), each behind the meter
(rousseau.costs) that checks the budget before a call and records its cost after."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import tzinfo
from typing import TYPE_CHECKING

from rousseau.agent import Provider, Request, Response, StreamEvent, streams
from rousseau.config import Config
from rousseau.config.base import BUILTIN_PROVIDERS
from rousseau.costs import Meter, Metered, Price, Prices
from rousseau.messages import DEFAULT_AGENT
from rousseau.providers import build_provider
from rousseau.providers.lazy import LazyProvider

if TYPE_CHECKING:
    from rousseau.messages import KeyValue
    from rousseau.metrics import Metrics
    from rousseau.state.protocol import SpendingStore

JOBS = ("compaction", "vision", "heartbeat", "cron", "delegation")
"""The background work `agent.models` may give a model of its own."""
_PROVIDERS = frozenset(BUILTIN_PROVIDERS)


@dataclass(kw_only=True, slots=True)
class AgentModels:
    """One agent's providers, by what they are for (each metered, where there is a meter)."""

    turn: Provider
    compaction: Provider
    heartbeat: Provider
    cron: Provider
    delegation: Provider


def build_meter(
    config: Config,
    spending: SpendingStore,
    *,
    metrics: Metrics | None = None,
    told: KeyValue | None = None,
    zone: tzinfo | None = None,
) -> Meter:
    """The meter of every agent's budget (`agent.budget`, each of `agents:`), with the
    configured prices over the built-in table; days count in cron.timezone."""
    from rousseau.cron.schedule import zone as zone_of

    names = [DEFAULT_AGENT, *(n for n in config.agents if n != DEFAULT_AGENT)]
    sections = {name: config.for_agent(name).agent for name in names}
    return Meter(
        spending,
        prices=Prices(
            {
                model: Price.of(p.input, p.output, p.cache_read, p.cache_write)
                for model, p in config.prices.items()
            }
        ),
        budgets={name: section.budget for name, section in sections.items()},
        zone=zone if zone is not None else zone_of(config.cron.timezone),
        owners={
            name: list(section.approver.owners)
            for name, section in sections.items()
            if section.approver is not None and section.approver.owners
        },
        told=told,
        metrics=metrics,
        # One daemon alone spends from a SQLite file: what it read, and added since, holds
        # (a `cron run` beside it is seen within the minute). Daemons sharing PostgreSQL read.
        remember=60.0 if config.state.url is None else 0.0,
    )


def model_ref(ref: str, own: str) -> tuple[str, str]:
    """(provider, model) of a `provider:model` reference, or of a model of provider `own`
    (a model's name may hold a colon itself: `llama3:8b`)."""
    name, sep, model = ref.partition(":")
    if sep and name in _PROVIDERS and model:
        return name, model
    return own, ref


def ref_provider(config: Config, ref: str, own: str, store: object = None) -> LazyProvider:
    """A provider for `ref` (see model_ref), built like the agent's own (`config`: the
    agent's), at first use."""
    name, model = model_ref(ref, own)
    section = getattr(config, name).model_copy(update={"model": model})
    chosen = config.model_copy(update={name: section, "provider": name})
    return LazyProvider(name, functools.partial(build_provider, chosen, name, store=store))


def agent_models(
    config: Config,
    provider: Provider,
    provider_name: str,
    *,
    agent: str = DEFAULT_AGENT,
    meter: Meter | None = None,
    made: list[Provider] | None = None,
    store: object = None,
) -> AgentModels:
    """Agent `agent`'s providers (`config`: the agent's own, `provider`: its model for
    turns, named `provider_name`); the ones built here join `made`, to be closed."""
    section = config.agent.models
    built: dict[tuple[str, str], Provider] = {}  # one provider per model, however named

    def of(job: str) -> Provider:
        ref = getattr(section, job)
        if ref is None:
            chosen = provider
        else:
            key = model_ref(ref, provider_name)
            if key not in built:
                built[key] = ref_provider(config, ref, provider_name, store)
                if made is not None:
                    made.append(built[key])
            chosen = built[key]
        return chosen if meter is None else Metered(chosen, meter, agent=agent, job=job)

    turn: Provider = provider if meter is None else Metered(provider, meter, agent=agent)
    if section.vision is not None:
        turn = ByImage(turn, of("vision"))
    return AgentModels(
        turn=turn,
        compaction=of("compaction"),
        heartbeat=of("heartbeat"),
        cron=of("cron"),
        delegation=of("delegation"),
    )


class ByImage:
    """Requests whose current turn carries an image go to `vision`, the rest to `main`."""

    def __init__(self, main: Provider, vision: Provider) -> None:
        self.main = main
        self.vision = vision
        self.name = main.name

    def _for(self, request: Request) -> Provider:
        return self.vision if _shows_image(request) else self.main

    async def complete(self, request: Request) -> Response:
        return await self._for(request).complete(request)

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        chosen = self._for(request)
        if not streams(chosen):
            response = await chosen.complete(request)
            if response.message.text:
                yield StreamEvent.text_delta(response.message.text)
            yield StreamEvent.final(response)
            return
        async with aclosing(chosen.stream(request)) as events:
            async for event in events:
                yield event


def _shows_image(request: Request) -> bool:
    """An image among the messages since the person last wrote (theirs included)."""
    for message in reversed(request.messages):
        if any(a.media_type.startswith("image/") for a in message.attachments):
            return True
        if message.starts_turn:
            return False
    return False
