"""The daemon's parts, built from its config in one place: the default provider, every agent
with its tools, the router, the cron scheduler, the cluster's share of them and the web faces.
The daemon only starts, supervises and closes what `assemble` hands it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from rousseau import web
from rousseau.agent import Agent, Attachment, ConfigError, Provider
from rousseau.agents import Routes, routes_of, turn_limits
from rousseau.approvals import ChatApprovals, load_shell_parser
from rousseau.assembly.agent import build_agent, build_approver, hybrid_recall
from rousseau.assembly.crew import build_agents, on_model
from rousseau.assembly.models import AgentModels, build_meter
from rousseau.config import Config, parse_rate
from rousseau.costs import Meter
from rousseau.costs.meter import Budgeted
from rousseau.cron import CronRunner, CronTool, Scheduler
from rousseau.cron.scheduler import HEARTBEAT
from rousseau.media import MediaIntake, move_to_workspace
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
from rousseau.transports.abilities import Abilities, TakesFiles
from rousseau.transports.base import Transport
from rousseau.transports.unreadable import count_refused

if TYPE_CHECKING:
    from anyio.abc import SocketStream, TaskGroup
    from anyio.streams.stapled import MultiListener

    from rousseau.state.hybrid import Indexer, VectorRecall
    from rousseau.state.protocol import ProfileStore

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
    scheduler = scheduler_for(config, router, backend, registry, metrics, models)
    await sync_heartbeats(
        config, scheduler, backend, {DEFAULT_AGENT: agent, **agents}, models, meter
    )
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


def routes_for(config: Config, transports: Mapping[str, Transport]) -> Routes:
    return dataclasses.replace(
        routes_of(config, transports), chosen_by_sender=web.CHOOSE_AGENT & transports.keys()
    )


def file_moves_for(
    config: Config, media: MediaIntake
) -> dict[str, Callable[[Attachment], Awaitable[Attachment]]]:
    return {
        name: functools.partial(move_to_workspace, media.blobs, source=media.workspace, target=ws)
        for name in config.agents
        if (ws := Path(config.for_agent(name).agent.workspace).expanduser()) != media.workspace
    }


def profiles_for(config: Config, backend: Backend) -> dict[str, ProfileStore]:
    return {
        name: backend.profiles
        for name in {DEFAULT_AGENT, *config.agents}
        if config.for_agent(name).agent.memory.enabled
    }


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
        routes=routes_for(config, transports),
        file_moves=file_moves_for(config, media),
        approvals=approvals,
        profiles=profiles_for(config, backend),
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


def scheduler_for(
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


async def sync_heartbeats(
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


def stream_settings(config: Config, name: str) -> StreamSettings:
    """A transport's streaming settings, from its section (the defaults without one)."""
    if name in web.STREAMING:
        return web.STREAMING[name]
    section = getattr(config, name, None)
    if section is None or not hasattr(section, "streaming"):
        return StreamSettings()
    return StreamSettings(streaming=section.streaming, progress=section.progress)
