"""Named agents and the routing table: which agent answers a message.

The router asks `Routes.agent_of` for each message it takes; the core stays one Agent class,
built once per agent from the configuration as that agent sees it (`Config.for_agent`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from rousseau.messages import DEFAULT_AGENT

if TYPE_CHECKING:
    from rousseau.config import Config, RouteConfig
    from rousseau.messages import Inbound


@dataclass(frozen=True, slots=True)
class Routes:
    routes: Sequence[RouteConfig] = ()
    """Tried in order; the first whose patterns all match names the agent."""
    by_transport: Mapping[str, str] = field(default_factory=dict)
    """A transport's own agent, for what no route matches."""
    default: str = DEFAULT_AGENT
    chosen_by_sender: frozenset[str] = frozenset()
    """Transports whose messages name their agent themselves (the OpenAI-compatible API:
    the model the caller asked for)."""

    def agent_of(self, inbound: Inbound) -> str:
        if inbound.transport in self.chosen_by_sender:
            return inbound.agent
        for route in self.routes:
            if (
                fnmatchcase(inbound.transport, route.transport)
                and fnmatchcase(inbound.chat_id, route.chat)
                and fnmatchcase(inbound.sender_id, route.sender)
                and fnmatchcase(inbound.thread_id or "", route.thread)
            ):
                return route.agent
        return self.by_transport.get(inbound.transport, self.default)


def routes_of(config: Config, transports: Iterable[str]) -> Routes:
    """The routing table `config` describes, for the transports that run."""
    by_transport = {}
    for name in transports:
        agent = getattr(getattr(config, name, None), "agent", None)  # its section's, if any
        if agent is not None:
            by_transport[name] = agent
    return Routes(routes=config.routes, by_transport=by_transport, default=config.default_agent)


def turn_limits(config: Config) -> dict[str, int]:
    """The agents with a max_concurrent_turns of their own."""
    sections = {DEFAULT_AGENT: config.agent, **config.agents}
    return {
        name: agent.max_concurrent_turns
        for name, agent in sections.items()
        if agent.max_concurrent_turns is not None
    }
