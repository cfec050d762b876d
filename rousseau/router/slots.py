"""The slots that bound how many turns run at once: the daemon's `max_concurrent_turns` and
an agent's own limit; a turn waiting for a person gives its slot back meanwhile."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar

import anyio

from rousseau.router.settings import RouterSettings
from rousseau.streaming import Preview

WAITING = "⏳ waiting for an owner to approve a tool call…"

previewing: ContextVar[Preview | None] = ContextVar("previewing", default=None)
"""The preview of the turn this task runs, if its reply streams (an approval wait shows in it)."""
_in_slot: ContextVar[tuple[anyio.CapacityLimiter, ...]] = ContextVar("in_turn_slot", default=())
"""The turn slots this task holds: its agent's (if it has a limit), then the daemon's."""


class TurnSlots:
    """Turns running at once: at most `max_concurrent_turns` in all, and at most an agent's
    own limit of that agent's (see RouterSettings.agent_turns)."""

    def __init__(self, settings: RouterSettings) -> None:
        self._limiter = anyio.CapacityLimiter(settings.max_concurrent_turns)
        self._agents = {
            name: anyio.CapacityLimiter(turns) for name, turns in settings.agent_turns.items()
        }

    def limit_agents(self, turns: Mapping[str, int]) -> None:
        """Agents' own limits as a reloaded config sets them (a kept agent's limiter kept,
        resized, so the turns it counts stay counted)."""
        kept = {}
        for name, most in turns.items():
            limiter = self._agents.get(name) or anyio.CapacityLimiter(most)
            limiter.total_tokens = most
            kept[name] = limiter
        self._agents = kept

    @asynccontextmanager
    async def hold(self, agent: str) -> AsyncIterator[None]:
        """A turn's slot: its agent's own (where the agent has a limit), then the daemon's."""
        own = self._agents.get(agent)
        held = (self._limiter,) if own is None else (own, self._limiter)
        async with own or contextlib.nullcontext(), self._limiter:
            token = _in_slot.set(held)
            try:
                yield
            finally:
                _in_slot.reset(token)

    @asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """While a turn waits for a person (an approval), its turn slot serves others, and
        its preview (if its reply streams) says what it waits for."""
        preview = previewing.get()
        if preview is not None:
            preview.status(WAITING)
        held = _in_slot.get()
        for limiter in reversed(held):
            limiter.release()
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                for limiter in held:
                    await limiter.acquire()
