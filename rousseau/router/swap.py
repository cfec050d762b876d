"""A reloaded config's agents given to a running router (see rousseau.assembly.reload)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from rousseau.agent import Agent, Attachment
from rousseau.agents import Routes
from rousseau.router.core import Router
from rousseau.state.protocol import ProfileStore


def swap_agents(
    router: Router,
    *,
    agent: Agent,
    agents: dict[str, Agent],
    routes: Routes,
    file_moves: dict[str, Callable[[Attachment], Awaitable[Attachment]]],
    profiles: Mapping[str, ProfileStore],
    agent_turns: Mapping[str, int],
) -> None:
    """The agents and routes of a reloaded config, for the turns that start from now on (a
    turn already running keeps the agent it started with: it holds it)."""
    router.agent, router.agents, router.routes = agent, agents, routes
    router.file_moves, router.profiles = file_moves, profiles
    turns = router._turns
    turns._agent, turns._agents, turns._file_moves = agent, agents, file_moves
    router._context = replace(router._context, profiles=profiles)
    router._slots.limit_agents(agent_turns)
    if router._sharing is not None:
        router._sharing._routes = routes
