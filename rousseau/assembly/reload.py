"""A changed config applied to the running daemon's parts: what can change live does, for
the turns that start next; what cannot is named (see Daemon.reload)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import anyio

from rousseau.agent import Provider
from rousseau.agents import turn_limits
from rousseau.approvals import load_shell_parser
from rousseau.assembly.models import build_meter
from rousseau.config import Config, parse_rate
from rousseau.messages import DEFAULT_AGENT
from rousseau.providers import build_provider, detect_provider
from rousseau.providers.lazy import LazyProvider

if TYPE_CHECKING:
    pass

from rousseau.assembly.crew import Agents, build_agents
from rousseau.assembly.parts import (
    Parts,
    file_moves_for,
    profiles_for,
    routes_for,
    scheduler_for,
    sync_heartbeats,
)
from rousseau.router.swap import swap_agents


async def reload(parts: Parts, config: Config) -> list[str]:
    """`config`'s agents, routes, approver rules, prompts, models, budgets, rate limits, cron
    settings and web keys in place of the running ones (turns already running finish on
    theirs); what could not change without a restart, one line each."""
    old = parts.config
    needs: list[str] = []
    if config.agent.approver is not None or config.cron.approver is not None:
        await anyio.to_thread.run_sync(load_shell_parser)
    sections = [config.agent, *config.agents.values()]
    if parts.approvals is None and any(a.approver is not None for a in sections):
        needs.append("agent.approver: the first approver (approvals by chat start at start-up)")
    made: list[Provider] = []
    provider = parts.given
    if provider is not None:
        name = provider.name
    else:
        name, _ = await anyio.to_thread.run_sync(detect_provider, config)
        provider = LazyProvider(
            name, functools.partial(build_provider, config, name, store=parts.backend.store)
        )
        made.append(provider)
    _remeter(parts, config)
    built = build_agents(
        config,
        parts.backend,
        parts.transports,
        provider=provider,
        provider_name=name,
        made=made,
        approvals=parts.approvals,
        media=parts.media,
        metrics=parts.metrics,
        meaning=parts.meaning,
        meter=parts.meter,
    )
    _keep_mcp_tools(parts, built)
    router = parts.router
    swap_agents(
        router,
        agent=built.agent,
        agents=built.agents,
        routes=routes_for(config, parts.transports),
        file_moves=file_moves_for(config, parts.media),
        profiles=profiles_for(config, parts.backend),
        agent_turns=turn_limits(config),
    )
    rl = config.ratelimit
    limiter = router.rate_limiter
    limiter.default = parse_rate(rl.default)
    limiter.per_transport = {k: parse_rate(v) for k, v in rl.per_transport.items()}
    limiter.max_keys = rl.max_keys
    router.admission.denied_reply = rl.denied_reply
    scheduler = parts.scheduler
    scheduler.runner = scheduler_for(
        config, router, parts.backend, built.registry, parts.metrics, built.models
    ).runner
    everyone = {DEFAULT_AGENT: built.agent, **built.agents}
    await sync_heartbeats(config, scheduler, parts.backend, everyone, built.models, parts.meter)
    built.cron_tool.on_change = scheduler.wake
    for face in parts.faces:
        _reface(face, config)
    needs += _restart_only(old, config)
    parts.config, parts.registries, parts.models = config, built.registries, built.models
    parts.providers.extend(made)  # the old ones too are closed at the end
    parts.cron_tool = built.cron_tool
    return needs


def _remeter(parts: Parts, config: Config) -> None:
    """The budgets, prices and owners of `config` on the running meter (what was spent kept)."""
    if parts.meter is None or parts.backend.spending is None:
        return
    fresh, meter = build_meter(config, parts.backend.spending), parts.meter
    meter.budgets, meter.prices = fresh.budgets, fresh.prices
    meter.owners, meter.zone = fresh.owners, fresh.zone


def _keep_mcp_tools(parts: Parts, built: Agents) -> None:
    """The connected MCP servers' tools in the new agents' registries, and their
    reconnections registering there from now on."""
    if parts.shared is None:
        return
    first, have = parts.registries[0], set(built.registry.names())
    for name in first.names():
        if name not in have:
            for registry in built.registries:
                registry.register(first.get(name))
    parts.shared.registries = list(built.registries)


def _restart_only(old: Config, new: Config) -> list[str]:
    """What changed that only a restart applies, one line each."""
    fixed = {
        "state": (old.state, new.state),
        "health": (old.health, new.health),
        "embeddings": (old.embeddings, new.embeddings),
        "max_concurrent_turns": (old.max_concurrent_turns, new.max_concurrent_turns),
        "send_timeout": (old.send_timeout, new.send_timeout),
        "agent.turn_timeout": (old.agent.turn_timeout, new.agent.turn_timeout),
        "media": (old.media, new.media),
        "speech": (old.speech, new.speech),
        "log": (old.log, new.log),
        "web.listen": tuple(c.web.listen if c.web is not None else None for c in (old, new)),
    }
    return [f"{key}: fixed at start-up" for key, (was, now) in fixed.items() if was != now]


def _reface(face: Any, config: Config) -> None:
    """A web face's keys and passwords as `config` sets them (its logins kept)."""
    section = config.web
    if face.config is None or section is None:
        return
    face.config = section
    logins = face.logins
    if logins is not None:
        logins.password_hash = (
            section.password_hash.get_secret_value() if section.password_hash else None
        )
        logins.chat_users = {n: h.get_secret_value() for n, h in section.chat_users.items()}
        logins.ttl = section.session_ttl
