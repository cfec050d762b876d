"""The daemon's parts, built from its config in one place: the default provider, every agent
with its tools, the router, the cron scheduler, the cluster's share of them and the web faces.
The daemon only starts, supervises and closes what `assemble` hands it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from rousseau import web
from rousseau.agent import Agent, Attachment, ConfigError, Provider
from rousseau.agent.approval import AskFn
from rousseau.agents import Routes, routes_of, turn_limits
from rousseau.approvals import ChatApprovals, load_shell_parser
from rousseau.assembly.agent import build_agent, build_approver, build_registry, hybrid_recall
from rousseau.assembly.models import AgentModels, agent_models, build_meter
from rousseau.config import Config, parse_rate
from rousseau.costs import Meter
from rousseau.costs.meter import Budgeted
from rousseau.cron import CronRunner, CronTool, Scheduler
from rousseau.cron.scheduler import HEARTBEAT
from rousseau.mcp.client import MCPConnection, mcp_tools
from rousseau.media import MediaIntake, move_to_workspace
from rousseau.media.tool import SendFileTool
from rousseau.messages import DEFAULT_AGENT
from rousseau.metrics import Metrics
from rousseau.policy import ChatPolicy, RateLimiter
from rousseau.providers import build_provider, detect_provider
from rousseau.providers.lazy import LazyProvider
from rousseau.router import Router, RouterSettings
from rousseau.router.voice import Speech
from rousseau.router.voice import modes as voice_modes
from rousseau.state.backend import Backend
from rousseau.streaming import StreamSettings
from rousseau.tools import Registry, Shared
from rousseau.tools.fs import Workspace
from rousseau.transports.abilities import Abilities, TakesFiles
from rousseau.transports.base import Transport
from rousseau.transports.unreadable import count_refused

if TYPE_CHECKING:
    from anyio.abc import SocketStream, TaskGroup
    from anyio.streams.stapled import MultiListener

    from rousseau.state.hybrid import Indexer, VectorRecall
    from rousseau.state.protocol import ProfileStore
    from rousseau.tools.delegate import DelegateTool

log = structlog.get_logger("rousseau.daemon")

VOICE_HINT = (
    "(Voice notes are not turned into text here yet, so I only know one arrived: please type"
    " it, or ask the owner to set up media.transcription.)"
)
"""Said once in a chat whose voice note nobody could transcribe."""


@dataclass(kw_only=True, slots=True)
class Parts:
    """What `assemble` built, ready for the daemon to run."""

    config: Config
    backend: Backend
    """The state the parts work on (opened, and closed, by the daemon)."""
    transports: dict[str, Transport]
    media: MediaIntake
    """Where inbound files go; its admission check is the router's."""
    metrics: Metrics
    provider: Provider
    """The default agent's provider: lazy (built on a thread while the transports start)
    unless the caller gave one."""
    router: Router
    scheduler: Scheduler
    registries: list[Registry]
    """Every agent's tools (the default agent's first), which MCP servers' tools join."""
    providers: list[Provider]
    """The providers made here (the default one and those of agents naming their own), to
    close at the end."""
    indexer: Indexer | None = None
    """With `embeddings`: what embeds every message in the background."""
    meter: Meter | None = None
    """What checks budgets before model calls and records what they cost."""
    models: dict[str, AgentModels] = dataclasses.field(default_factory=dict)
    """Each agent's providers by job (turns, compaction, heartbeat, cron, delegation)."""
    approvals: ChatApprovals | None = None
    meaning: VectorRecall | None = None
    given: Provider | None = None
    """The provider the caller gave (kept across a reload), if any."""
    cron_tool: CronTool | None = None
    shared: Shared | None = None
    """Where MCP servers' tools are registered (every agent's registry)."""
    faces: list[Any] = dataclasses.field(default_factory=list)
    """The web faces served (their keys and passwords change on a reload)."""

    def tools_connected(self) -> AbstractAsyncContextManager[list[MCPConnection]]:
        """The configured MCP servers connected, their tools given to every agent, while
        the block runs."""
        self.shared = Shared(self.registries)
        return mcp_tools(self.config.mcp_servers, self.shared)

    def server(
        self,
        key: str,
        *,
        health: Callable[[], dict[str, dict[str, Any]]],
        errors: Mapping[str, str],
        tg: TaskGroup,
    ) -> Callable[[MultiListener[SocketStream]], Coroutine[Any, Any, None]]:
        """What the server of `key` (one of web.servers) serves on its listener: /healthz
        and /metrics alone ("health"), the whole web face of `web:` ("web"), or the posts
        of a transport's webhook alone (an address of their own); the first two with the
        posts taken at their address. `health` and `errors` are the daemon's view of the
        transports; `tg` runs what outlives a request."""
        posts = web.posts_at(web.servers(self.config, self.transports)[key], self.transports)
        if key not in ("health", "web"):
            return functools.partial(web.serve_posts, posts)
        face = web.face(
            self.config if key == "web" else None,
            health=health,
            metrics=self.metrics,
            errors=errors,
            transports=self.transports,
            approvals=self.router.approvals,
            scheduler=self.scheduler,
            backend=self.backend,
            tg=tg,
            posts=posts,
            meter=self.meter,
        )
        self.faces.append(face)
        return functools.partial(web.serve, face)


async def assemble(
    config: Config,
    backend: Backend,
    transports: dict[str, Transport],
    *,
    media: MediaIntake,
    metrics: Metrics,
    policies: dict[str, ChatPolicy],
    provider: Provider | None = None,
) -> Parts:
    """The daemon's parts for `config` on `backend`, serving `transports` (each bound to its
    durable state and, where it takes files, to `media`); `provider` stands in for the
    configured one (tests, embedding). Blocking work (the shell parser's import, probing for
    a provider) runs on a thread."""
    if config.agent.approver is not None or config.cron.approver is not None:
        await anyio.to_thread.run_sync(load_shell_parser)  # for bash rules: 0.2 s
    for name, transport in transports.items():
        transport.bind_state(backend.transport_state(name))
        count_refused(transport, metrics.failed_inbound.labels(name).inc)
        if isinstance(transport, TakesFiles):
            transport.bind_media(media)
    given = provider
    made: list[Provider] = []
    if provider is not None:
        name, why = provider.name, "given by the caller"
    else:
        name, why = await anyio.to_thread.run_sync(detect_provider, config)
        # Built (its SDK imported: 0.3-0.7 s for openai) while the transports start, not
        # before; turns wait for it.
        provider = LazyProvider(
            name, functools.partial(build_provider, config, name, store=backend.store)
        )
        made.append(provider)
    log.info("daemon.starting", provider=name, reason=why, transports=sorted(transports))
    default = config.for_agent(DEFAULT_AGENT)
    sections = [default.agent, *default.agents.values()]
    # The owner logged in to the web face is an owner: told in its chat how to answer, and
    # able to answer on the dashboard anyway.
    also = [web.OWNER_SENDER] if default.web is not None else []
    needed = any(a.approver is not None for a in sections)
    approvals = ChatApprovals(also=also) if needed else None
    if approvals is not None and backend.cluster is not None:
        approvals.relay = backend.cluster.approvals()  # answered on any daemon
    hybrid = await hybrid_recall(config, backend)
    meaning, indexer = hybrid if hybrid is not None else (None, None)
    meter = None
    if backend.spending is not None:
        meter = build_meter(
            config, backend.spending, metrics=metrics, told=backend.transport_state("costs")
        )
    built = build_agents(
        config,
        backend,
        transports,
        provider=provider,
        provider_name=name,
        made=made,
        approvals=approvals,
        media=media,
        metrics=metrics,
        meaning=meaning,
        meter=meter,
    )
    agent, agents, registry, models = built.agent, built.agents, built.registry, built.models
    registries, cron_tool = built.registries, built.cron_tool
    router = build_router(
        default,
        backend,
        transports,
        agent=agent,
        agents=agents,
        approvals=approvals,
        media=media,
        metrics=metrics,
        policies=policies,
        meter=meter,
    )
    if meter is not None:
        meter.notify = router.notify
        if media.transcriber is not None:  # a voice note's transcription is budgeted too
            media.transcriber = Budgeted(media.transcriber, meter)
    scheduler = _scheduler(config, router, backend, registry, metrics, models)
    await _heartbeats(config, scheduler, backend, {DEFAULT_AGENT: agent, **agents}, models, meter)
    cron_tool.on_change = scheduler.wake
    if backend.cluster is not None:  # a page's reply goes out where the page is connected
        backend.cluster.stays = frozenset(
            name for name, t in transports.items() if Abilities.of(t).replies_stay
        )
        # and another reply where its transport is connected: on the daemon elected for it
        backend.cluster.elected = frozenset(
            name for name, t in transports.items() if not Abilities.of(t).shares_connections
        )
    return Parts(
        config=config,
        backend=backend,
        transports=transports,
        media=media,
        metrics=metrics,
        provider=provider,
        router=router,
        scheduler=scheduler,
        registries=registries,
        providers=made,
        indexer=indexer,
        meter=meter,
        models=models,
        approvals=approvals,
        meaning=meaning,
        given=given,
        cron_tool=cron_tool,
    )


def _routes(config: Config, transports: Mapping[str, Transport]) -> Routes:
    return dataclasses.replace(
        routes_of(config, transports), chosen_by_sender=web.CHOOSE_AGENT & transports.keys()
    )


def _file_moves(
    config: Config, media: MediaIntake
) -> dict[str, Callable[[Attachment], Awaitable[Attachment]]]:
    return {
        name: functools.partial(move_to_workspace, media.blobs, source=media.workspace, target=ws)
        for name in config.agents
        if (ws := Path(config.for_agent(name).agent.workspace).expanduser()) != media.workspace
    }


def _profiles(config: Config, backend: Backend) -> dict[str, ProfileStore]:
    return {
        name: backend.profiles
        for name in {DEFAULT_AGENT, *config.agents}
        if config.for_agent(name).agent.memory.enabled
    }


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
    router.swap(
        agent=built.agent,
        agents=built.agents,
        routes=_routes(config, parts.transports),
        file_moves=_file_moves(config, parts.media),
        profiles=_profiles(config, parts.backend),
        agent_turns=turn_limits(config),
    )
    rl = config.ratelimit
    limiter = router.rate_limiter
    limiter.default = parse_rate(rl.default)
    limiter.per_transport = {k: parse_rate(v) for k, v in rl.per_transport.items()}
    limiter.max_keys = rl.max_keys
    router.admission.denied_reply = rl.denied_reply
    scheduler = parts.scheduler
    scheduler.runner = _scheduler(
        config, router, parts.backend, built.registry, parts.metrics, built.models
    ).runner
    everyone = {DEFAULT_AGENT: built.agent, **built.agents}
    await _heartbeats(config, scheduler, parts.backend, everyone, built.models, parts.meter)
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
    first = parts.registries[0]
    for name in first.names():
        if built.registry.get(name) is None:
            for registry in built.registries:
                registry.register(first.get(name))
    parts.shared.registries = list(built.registries)


def _restart_only(old: Config, new: Config) -> list[str]:
    """What changed that only a restart applies, one line each."""
    needs = []
    if new.mcp_servers != old.mcp_servers:
        needs.append("mcp_servers: servers added, removed or changed")
    for key in ("state", "health", "embeddings", "max_concurrent_turns", "send_timeout"):
        if getattr(new, key) != getattr(old, key):
            needs.append(f"{key}: fixed at start-up")
    listens = [(c.web.listen if c.web is not None else None) for c in (old, new)]
    if listens[0] != listens[1]:
        needs.append("web.listen: the web face's address")
    return needs


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


def build_router(
    config: Config,
    backend: Backend,
    transports: dict[str, Transport],
    *,
    agent: Agent,
    agents: dict[str, Agent],
    approvals: ChatApprovals | None,
    media: MediaIntake,
    metrics: Metrics,
    policies: dict[str, ChatPolicy],
    meter: Meter | None = None,
) -> Router:
    """The router of `transports` (`config`: the default agent's), answering with `agent` or
    one of `agents`; chat approvals are announced through it and files admitted by it."""
    rl = config.ratelimit
    router = Router(
        agent=agent,
        agents=agents,
        routes=_routes(config, transports),
        file_moves=_file_moves(config, media),
        approvals=approvals,
        profiles=_profiles(config, backend),
        store=backend.store,
        daemon_state=backend.state,
        transport_state=backend.transport_state,
        shared=backend.cluster,
        transports=transports,
        policies=policies,
        rate_limiter=RateLimiter(
            parse_rate(rl.default),
            {k: parse_rate(v) for k, v in rl.per_transport.items()},
            rl.max_keys,
        ),
        metrics=metrics,
        meter=meter,
        speech=_speech(config, media, meter),
        settings=RouterSettings(
            denied_reply=rl.denied_reply,
            max_concurrent_turns=config.max_concurrent_turns,
            agent_turns=turn_limits(config),
            turn_timeout=config.agent.turn_timeout,
            send_timeout=config.send_timeout,
            voice_hint=VOICE_HINT if config.media.transcription is None else "",
            voice_replies=voice_modes(
                {n: getattr(getattr(config, n, None), "voice_replies", None) for n in transports},
                speaking=config.speech is not None,
            ),
            streaming={name: stream_settings(config, name) for name in transports},
            acks={
                name: emoji
                for name in transports
                if (emoji := getattr(getattr(config, name, None), "ack_reaction", ""))
            },
        ),
    )
    if approvals is not None:
        approvals.notify = router.notify
    media.admits = router.admission.takes_files
    return router


def _speech(config: Config, media: MediaIntake, meter: Meter | None) -> Speech | None:
    """Spoken replies, where `speech` is configured (the SDK and PyAV load at the first)."""
    section = config.speech
    if section is None:
        return None
    from rousseau.media.speech import LocalSpeaker, Speaker, speakable

    key = section.api_key.get_secret_value() if section.api_key is not None else None
    speaker: Speaker | LocalSpeaker
    if section.engine == "piper":
        speaker = LocalSpeaker(section.voice)
    else:
        assert section.base_url is not None  # the config checked it
        speaker = Speaker(
            base_url=section.base_url,
            api_key=key,
            model=section.model,
            voice=section.voice,
            timeout=section.timeout,
        )
    return Speech(
        speaker=speaker,
        blobs=media.blobs,
        prepare=functools.partial(
            speakable, max_chars=section.max_chars, max_notes=section.max_notes
        ),
        meter=meter,
        price=section.price_per_million_chars,
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


def agent_config(config: Config, agent: str, detected: str) -> tuple[Config, str]:
    """The configuration agent `agent` runs with, and the provider it uses (`detected`, the
    one detect_provider chose, where neither it nor the top level names one)."""
    own = config.for_agent(agent, detected)
    return own, own.provider or detected


def _scheduler(
    config: Config,
    router: Router,
    backend: Backend,
    registry: Registry,
    metrics: Metrics,
    models: dict[str, AgentModels],
) -> Scheduler:
    """The cron loop; a job's turn runs on the default agent (with the tools of `registry`),
    unattended: a call that would ask is denied, unless `cron.approver` says otherwise."""
    cron = config.cron
    store = backend.store
    agent = on_model(router.agent, models[DEFAULT_AGENT].cron)
    if cron.approver is not None:
        approver = build_approver(config, section=cron.approver)
        agent = build_agent(
            config,
            models[DEFAULT_AGENT].cron,
            store,
            registry=registry,
            approver=approver,
            profiles=backend.profiles,
            metrics=metrics,
        )
    runner = CronRunner(
        agent=agent,
        agents={name: on_model(a, models[name].cron) for name, a in router.agents.items()},
        store=store,
        notify=router.notify,
        timeout=cron.timeout,
        notify_failures=cron.notify_failures,
    )
    return Scheduler(jobs=backend.jobs, runner=runner, poll_interval=cron.poll_interval)


async def _heartbeats(
    config: Config,
    scheduler: Scheduler,
    backend: Backend,
    agents: Mapping[str, Agent],
    models: Mapping[str, AgentModels],
    meter: Meter | None,
) -> None:
    """Each agent's `heartbeat`, run by the scheduler as the job `heartbeat:AGENT`, which is
    made (or changed, or removed) here to match the config."""
    sections = {n: config.for_agent(n).agent for n in agents}
    wanted = {n: s.heartbeat for n, s in sections.items() if s.heartbeat is not None}
    if not wanted and not any(j.name.startswith(HEARTBEAT) for j in await backend.jobs.all()):
        return  # none configured, none to remove: the module is not even imported
    from rousseau.cron import CronJobs
    from rousseau.cron.heartbeat import Heartbeat, sync_jobs
    from rousseau.cron.schedule import zone
    from rousseau.cron.targets import TargetError, parse_target

    for name, section in wanted.items():
        try:
            parse_target(section.deliver_to)
        except TargetError as exc:
            key = "agent" if name == DEFAULT_AGENT else f"agents.{name}"
            raise ConfigError(f"{key}.heartbeat.deliver_to: {exc}") from None

    heartbeats = {
        name: Heartbeat(
            name=name,
            agent=on_model(agents[name], models[name].heartbeat),
            section=section,
            workspace=sections[name].workspace,
            store=backend.store,
            zone=zone(config.cron.timezone),
            meter=meter,
        )
        for name, section in wanted.items()
    }
    scheduler.runner.heartbeats = heartbeats
    await sync_jobs(CronJobs(backend.jobs), heartbeats, config.cron.timezone)


def on_model(agent: Agent, provider: Provider) -> Agent:
    """The agent with the same tools and options, asking `provider` (one for a job)."""
    if provider is agent.provider:
        return agent
    return Agent(provider, agent.tools, agent.options)


def _ask(approvals: ChatApprovals | None, config: Config) -> AskFn | None:
    """How the agent `config.agent` describes puts a question to its own approver's owners
    in chat; None where it has no approver (its default rules ask no one)."""
    ac = config.agent.approver
    if approvals is None or ac is None:
        return None
    return approvals.asking(ac.owners, ac.approval_timeout)


def stream_settings(config: Config, name: str) -> StreamSettings:
    """A transport's streaming settings, from its section (the defaults without one)."""
    if name in web.STREAMING:
        return web.STREAMING[name]
    section = getattr(config, name, None)
    if section is None or not hasattr(section, "streaming"):
        return StreamSettings()
    return StreamSettings(streaming=section.streaming, progress=section.progress)
