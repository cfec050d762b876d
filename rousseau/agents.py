"""Named agents and the routing table: which agent answers a message.

The router asks `Routes.agent_of` for each message it takes; the core stays one Agent class,
built once per agent from the configuration as that agent sees it (`Config.for_agent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rousseau.config import RouteConfig
    from rousseau.transports.base import Inbound

DEFAULT_AGENT = "default"
"""The agent of the top-level `agent:` section, and of every session before agents existed."""


@dataclass(frozen=True, slots=True)
class Routes:
    routes: Sequence[RouteConfig] = ()
    """Tried in order; the first whose patterns all match names the agent."""
    by_transport: Mapping[str, str] = field(default_factory=dict)
    """A transport's own agent, for what no route matches."""
    default: str = DEFAULT_AGENT

    def agent_of(self, inbound: Inbound) -> str:
        for route in self.routes:
            if (
                fnmatchcase(inbound.transport, route.transport)
                and fnmatchcase(inbound.chat_id, route.chat)
                and fnmatchcase(inbound.sender_id, route.sender)
                and fnmatchcase(inbound.thread_id or "", route.thread)
            ):
                return route.agent
        return self.by_transport.get(inbound.transport, self.default)
