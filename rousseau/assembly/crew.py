"""The agents of a config: each with its tools, its models, its approver and its prompt,
and the delegation between them (built at start-up, and again by a reload)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from rousseau.agent import Agent, Provider
from rousseau.agent.approval import AskFn
from rousseau.approvals import ChatApprovals
from rousseau.assembly.agent import build_agent, build_registry
from rousseau.assembly.models import AgentModels, agent_models
from rousseau.config import Config
from rousseau.costs import Meter
from rousseau.cron import CronTool
from rousseau.media import MediaIntake
from rousseau.media.tool import SendFileTool
from rousseau.messages import DEFAULT_AGENT
from rousseau.metrics import Metrics
from rousseau.providers import build_provider
from rousseau.providers.lazy import LazyProvider
from rousseau.state.backend import Backend
from rousseau.tools import Registry
from rousseau.tools.fs import Workspace
from rousseau.transports.abilities import Abilities
from rousseau.transports.base import Transport

if TYPE_CHECKING:
    from rousseau.state.hybrid import VectorRecall
    from rousseau.tools.delegate import DelegateTool


log = structlog.get_logger("rousseau.daemon")


@dataclass(kw_only=True, slots=True)
class Agents:
    """The agents of a config and what they are made of."""

    agent: Agent
    """The default agent."""
    agents: dict[str, Agent]
    registry: Registry
    registries: list[Registry]
    models: dict[str, AgentModels]
    cron_tool: CronTool


def build_agents(
    config: Config,
    backend: Backend,
    transports: dict[str, Transport],
    *,
    provider: Provider,
    provider_name: str,
    made: list[Provider],
    approvals: ChatApprovals | None,
    media: MediaIntake,
    metrics: Metrics,
    meaning: VectorRecall | None,
    meter: Meter | None,
) -> Agents:
    """Every agent of `config`: its tools, models, approver and prompt (the providers made
    for it appended to `made`)."""
    default = config.for_agent(DEFAULT_AGENT)
    store = backend.store
    registry = _tools(default, transports, media)
    delegates = {DEFAULT_AGENT: _delegate(default, registry, backend)}
    cron_tool = CronTool(backend.jobs, timezone=default.cron.timezone)
    registry.register(cron_tool)
    models = {
        DEFAULT_AGENT: agent_models(
            default, provider, provider_name, meter=meter, made=made, store=store
        )
    }
    agent = build_agent(
        default,
        models[DEFAULT_AGENT].turn,
        store,
        registry=registry,
        ask=_ask(approvals, default),
        profiles=backend.profiles,
        metrics=metrics,
        meaning=meaning,
        compaction=models[DEFAULT_AGENT].compaction,
    )
    registries = [registry]
    agents = _agents(
        config,
        provider,
        provider_name,
        backend,
        approvals,
        transports,
        media,
        registries,
        made,
        metrics,
        meaning,
        meter,
        models,
        delegates,
    )
    _bind_delegates(config, delegates, {DEFAULT_AGENT: agent, **agents}, models)
    return Agents(
        agent=agent,
        agents=agents,
        registry=registry,
        registries=registries,
        models=models,
        cron_tool=cron_tool,
    )


def _tools(
    config: Config,
    transports: Mapping[str, Transport],
    media: MediaIntake,
    agent: str = DEFAULT_AGENT,
) -> Registry:
    """The built-in tools in the workspace of `config.agent` (agent `agent`'s), and
    send_file where a transport can send files."""
    registry = build_registry(config, agent)
    file_limits = {
        name: int(limit)
        for name, transport in transports.items()
        if (limit := Abilities.of(transport).max_file_bytes)
    }
    if file_limits:  # a transport that can send files: the model may attach some
        workspace = Workspace(Path(config.agent.workspace).expanduser())
        registry.register(SendFileTool(workspace, media.blobs, file_limits))
    return registry


def _agents(
    config: Config,
    provider: Provider,
    provider_name: str,
    backend: Backend,
    approvals: ChatApprovals | None,
    transports: Mapping[str, Transport],
    media: MediaIntake,
    registries: list[Registry],
    providers: list[Provider],
    metrics: Metrics,
    meaning: VectorRecall | None,
    meter: Meter | None,
    models: dict[str, AgentModels],
    delegates: dict[str, DelegateTool | None],
) -> dict[str, Agent]:
    """The agents of `agents:` but the default, each with its own workspace, tools (added to
    `registries`), recall, memory, approver and owners to ask, and (where it names another
    provider or model) provider (added to `providers`); each one's providers by job join
    `models`."""
    store = backend.store
    agents = {}
    for name in config.agents:
        if name == DEFAULT_AGENT:
            continue
        own, chosen = agent_config(config, name, provider_name)
        used = provider
        if config.own_provider(name):
            used = LazyProvider(chosen, functools.partial(build_provider, own, chosen, store=store))
            providers.append(used)
        models[name] = agent_models(
            own, used, chosen, agent=name, meter=meter, made=providers, store=store
        )
        # No cron tool: what a job runs on is the owner's choice (cron add --agent).
        registry = _tools(own, transports, media, name)
        registries.append(registry)
        delegates[name] = _delegate(own, registry, backend, name)
        ask = _ask(approvals, own)
        agents[name] = build_agent(
            own,
            models[name].turn,
            store,
            registry=registry,
            ask=ask,
            name=name,
            profiles=backend.profiles,
            metrics=metrics,
            meaning=meaning,
            compaction=models[name].compaction,
        )
    return agents


def _delegate(
    config: Config, registry: Registry, backend: Backend, agent: str = DEFAULT_AGENT
) -> DelegateTool | None:
    """The delegate tool in the agent's registry, where `agent.delegation` is set."""
    section = config.agent.delegation
    if section is None:
        return None
    from rousseau.tools.delegate import DelegateTool

    tool = DelegateTool(
        agent=agent,
        store=backend.store,
        agents=section.agents,
        max_children=section.max_children,
        max_depth=section.max_depth,
    )
    registry.register(tool)
    return tool


def _bind_delegates(
    config: Config,
    delegates: Mapping[str, DelegateTool | None],
    agents: Mapping[str, Agent],
    models: Mapping[str, AgentModels],
) -> None:
    """Each delegate tool given its agent, the agents it may hand tasks to, and the model of
    its fresh sub-agents, now that every agent is built."""
    from rousseau.tools.delegate import Delegation

    for name, tool in delegates.items():
        if tool is None:
            continue
        tool.bind(
            Delegation(
                caller=agents[name],
                agents={n: agents[n] for n in tool.allowed if n in agents},
                provider=models[name].delegation,
            )
        )


def _ask(approvals: ChatApprovals | None, config: Config) -> AskFn | None:
    """How the agent `config.agent` describes puts a question to its own approver's owners
    in chat; None where it has no approver (its default rules ask no one)."""
    ac = config.agent.approver
    if approvals is None or ac is None:
        return None
    return approvals.asking(ac.owners, ac.approval_timeout)


def on_model(agent: Agent, provider: Provider) -> Agent:
    """The agent with the same tools and options, asking `provider` (one for a job)."""
    if provider is agent.provider:
        return agent
    return Agent(provider, agent.tools, agent.options)


def agent_config(config: Config, agent: str, detected: str) -> tuple[Config, str]:
    """The configuration agent `agent` runs with, and the provider it uses (`detected`, the
    one detect_provider chose, where neither it nor the top level names one)."""
    own = config.for_agent(agent, detected)
    return own, own.provider or detected
