"""The supervisor: config -> store, agent, router, transports -> one task group.

Each transport runs as a supervised task restarted with backoff, so one failing platform never
stops the others. SIGTERM/SIGINT stop intake, give in-flight turns `shutdown_grace` to finish,
close the transports and checkpoint the WAL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.abc import SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

from rousseau import web
from rousseau.agent import Agent, ConfigError, Provider, TransportAuthError
from rousseau.agent.approval import AskFn
from rousseau.agents import routes_of, turn_limits
from rousseau.app import build_agent, build_approver, build_registry, media_intake
from rousseau.approvals import ChatApprovals, load_shell_parser
from rousseau.backoff import backoff
from rousseau.config import Config, HealthConfig, parse_rate
from rousseau.cron import CronRunner, CronTool, Scheduler
from rousseau.mcp.client import mcp_tools
from rousseau.media import move_to_workspace
from rousseau.media.tool import SendFileTool
from rousseau.messages import DEFAULT_AGENT
from rousseau.metrics import LagProbe, Metrics
from rousseau.policy import ChatPolicy, RateLimiter
from rousseau.policy import chat_policies as configured_policies
from rousseau.providers import build_provider, detect_provider
from rousseau.providers.lazy import LazyProvider
from rousseau.router import Router
from rousseau.state import SessionStore
from rousseau.state.backend import Backend, open_backend
from rousseau.state.lock import DaemonLock
from rousseau.streaming import StreamSettings
from rousseau.tools import Registry, Shared
from rousseau.tools.fs import Workspace
from rousseau.transports import build_transports
from rousseau.transports.abilities import Abilities, TakesFiles
from rousseau.transports.base import Transport
from rousseau.transports.unreadable import count_refused

if TYPE_CHECKING:
    from rousseau.state.postgres_daemon import PostgresDaemonState

log = structlog.get_logger("rousseau.daemon")

BACKOFF_CAP = 300.0
CLOSE_TIMEOUT = 5.0
"""At shutdown, the longest any one close (a transport, the provider, the store) may take."""
FIRST_SWEEP = 30.0
BLOB_GRACE = 3600.0
"""Seconds a stored file is kept before the sweep may delete it unused (a file stored for a
message is recorded with it within moments)."""
VOICE_HINT = (
    "(Voice notes are not turned into text here yet, so I only know one arrived: please type"
    " it, or ask the owner to set up media.transcription.)"
)
"""Said once in a chat whose voice note nobody could transcribe."""
FULL_COLLECTION_EVERY = 100
"""Collections of the garbage collector's middle generation between two full ones (see
_startup_objects_frozen)."""
PUBLISH_EVERY = 2.0
"""How often the transports' state is looked at for `rousseau status` (written on change)."""


async def _quietly(fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    except Exception as exc:
        log.warning("daemon.stop_failed", error=str(exc) or type(exc).__name__)


def sd_notify(state: str) -> bool:
    """Tell systemd about our state (READY=1, STOPPING=1, WATCHDOG=1) if it is listening."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
        return True
    except OSError as exc:
        log.warning("daemon.notify_failed", error=str(exc))
        return False


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        only: str | None = None,
        transports: dict[str, Transport] | None = None,
        chat_policies: dict[str, ChatPolicy] | None = None,
        provider: Provider | None = None,
    ) -> None:
        self.config = config
        self.provider = provider
        self.transports = transports if transports is not None else build_transports(config, only)
        self.chat_policies = {**configured_policies(config), **(chat_policies or {})}
        self._media = media_intake(config)
        """Where the transports put inbound files (its admission check is set with the
        router), and where send_file and the sweep find the blob store."""
        self._providers: list[Provider] = []
        """The providers of agents that name their own, to close with the default one."""
        self.metrics = Metrics()
        self.lag = LagProbe(self.metrics)
        self._stop = anyio.Event()
        self.stopped: dict[str, str] = {}
        """Transports stopped for good (a rejected credential), with the reason."""
        self.errors: dict[str, str] = {}
        """Each transport's last failure (it was restarted after it)."""

    async def run(self) -> int:
        config = self.config
        # First of all: a second daemon on this database leaves before it touches anything;
        # next the health port, which, taken or not this machine's, is a config error to
        # name before anything starts.
        if config.web is not None:
            web.check_installed()
        lock = DaemonLock(config.state.path)
        await anyio.to_thread.run_sync(lock.acquire)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(lock.release)
            listeners: dict[str, MultiListener[SocketStream]] = {}
            for key, section in (("health", config.health), ("web", config.web)):
                if section is not None:
                    listener = await _listen(section, key)
                    listeners[key] = await stack.enter_async_context(listener)
            with _startup_objects_frozen() as started:
                await self._run(lock, listeners, started)
        log.info("daemon.stopped")
        return 0

    async def _run(
        self,
        lock: DaemonLock,
        listeners: dict[str, MultiListener[SocketStream]],
        started: Callable[[], None],
    ) -> None:
        config = self.config
        async with anyio.create_task_group() as probes:
            probes.start_soon(self.lag.run)
            probes.start_soon(self._publish, lock)
            # Importing the shell parser and building the provider (its SDK's import) are
            # blocking work: off the event loop (as is opening a SQLite store).
            backend = await open_backend(config)
            store = backend.store
            if config.agent.approver is not None or config.cron.approver is not None:
                await anyio.to_thread.run_sync(load_shell_parser)  # for bash rules: 0.2 s
            provider: Provider | None = None
            try:
                for name, transport in self.transports.items():
                    transport.bind_state(backend.transport_state(name))
                    count_refused(transport, self.metrics.failed_inbound.labels(name).inc)
                    if isinstance(transport, TakesFiles):
                        transport.bind_media(self._media)
                if self.provider is not None:
                    provider, name, why = self.provider, self.provider.name, "given by the caller"
                else:
                    name, why = await anyio.to_thread.run_sync(detect_provider, config)
                    # Built (its SDK imported: 0.3-0.7 s for openai) while the transports
                    # start, not before; turns wait for it.
                    lazy = LazyProvider(
                        name, functools.partial(build_provider, config, name, store=store)
                    )
                    probes.start_soon(_built, lazy, started)
                    provider = lazy
                log.info(
                    "daemon.starting",
                    provider=name,
                    reason=why,
                    transports=sorted(self.transports),
                )
                router = self._router(provider, name, backend)
                if self.provider is not None:
                    started()
                async with mcp_tools(config.mcp_servers, Shared(self._registries)):
                    await self._serve(router, self._scheduler(router, backend), listeners, backend)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._close(provider, backend)
            probes.cancel_scope.cancel()

    async def _close(self, provider: Provider | None, backend: Backend) -> None:
        """Close every transport, the provider and the transcriber (each given a few
        seconds, a failure never skipping the rest), then checkpoint and close the store."""

        async def close(what: str, aclose: Callable[[], Awaitable[None]]) -> None:
            try:
                with anyio.fail_after(CLOSE_TIMEOUT):
                    await aclose()
            except Exception as exc:  # TimeoutError included: a hung close is left behind
                log.warning("daemon.close_failed", what=what, error=str(exc) or type(exc).__name__)

        async with anyio.create_task_group() as tg:
            for name, transport in self.transports.items():
                tg.start_soon(close, name, transport.aclose)
            for each in (provider, *self._providers):
                closer = getattr(each, "aclose", None)
                if closer is not None:
                    tg.start_soon(close, "provider", closer)
            transcriber = getattr(self._media.transcriber, "aclose", None)
            if transcriber is not None:
                tg.start_soon(close, "transcriber", transcriber)
        await backend.aclose()

    def _tools(self, config: Config) -> Registry:
        """The built-in tools in the workspace of `config.agent`, and send_file where a
        transport can send files."""
        registry = build_registry(config)
        file_limits = {
            name: int(limit)
            for name, transport in self.transports.items()
            if (limit := Abilities.of(transport).max_file_bytes)
        }
        if file_limits:  # a transport that can send files: the model may attach some
            workspace = Workspace(Path(config.agent.workspace).expanduser())
            registry.register(SendFileTool(workspace, self._media.blobs, file_limits))
        return registry

    def _agents(
        self,
        provider: Provider,
        provider_name: str,
        store: SessionStore,
        approvals: ChatApprovals | None,
    ) -> dict[str, Agent]:
        """The agents of `agents:` but the default, each with its own workspace, tools,
        recall, approver and owners to ask, and (where it names another provider or model)
        provider."""
        agents = {}
        for name in self.config.agents:
            if name == DEFAULT_AGENT:
                continue
            config = self.config.for_agent(name, provider_name)
            own = provider
            if self.config.own_provider(name):
                chosen = config.provider or provider_name
                own = LazyProvider(
                    chosen, functools.partial(build_provider, config, chosen, store=store)
                )
                self._providers.append(own)
            ask = _ask(approvals, config)
            # No cron tool: what a job runs on is the owner's choice (cron add --agent).
            registry = self._tools(config)
            self._registries.append(registry)
            agents[name] = build_agent(config, own, store, registry=registry, ask=ask, name=name)
        return agents

    def _router(self, provider: Provider, provider_name: str, backend: Backend) -> Router:
        config = self.config.for_agent(DEFAULT_AGENT)
        store = backend.store
        rl = config.ratelimit
        registry = self._registry = self._tools(config)
        self._registries = [registry]
        self._cron_tool = CronTool(backend.jobs, timezone=config.cron.timezone)
        registry.register(self._cron_tool)
        sections = [config.agent, *config.agents.values()]
        approvals = ChatApprovals() if any(a.approver is not None for a in sections) else None
        if approvals is not None and backend.cluster is not None:
            approvals.relay = backend.cluster.approvals()  # answered on any daemon
        router = Router(
            agent=build_agent(
                config, provider, store, registry=registry, ask=_ask(approvals, config)
            ),
            agents=self._agents(provider, provider_name, store, approvals),
            routes=dataclasses.replace(
                routes_of(config, self.transports),
                chosen_by_sender=web.CHOOSE_AGENT & self.transports.keys(),
            ),
            file_moves={
                name: functools.partial(
                    move_to_workspace, self._media.blobs, source=self._media.workspace, target=ws
                )
                for name in config.agents
                if (ws := Path(config.for_agent(name).agent.workspace).expanduser())
                != self._media.workspace
            },
            agent_turns=turn_limits(config),
            approvals=approvals,
            store=store,
            daemon_state=backend.state,
            transport_state=backend.transport_state,
            shared=backend.cluster,
            transports=self.transports,
            policies=self.chat_policies,
            rate_limiter=RateLimiter(
                parse_rate(rl.default),
                {k: parse_rate(v) for k, v in rl.per_transport.items()},
                rl.max_keys,
            ),
            denied_reply=rl.denied_reply,
            max_concurrent_turns=config.max_concurrent_turns,
            metrics=self.metrics,
            turn_timeout=config.agent.turn_timeout,
            send_timeout=config.send_timeout,
            voice_hint=VOICE_HINT if config.media.transcription is None else "",
            streaming={name: _stream_settings(config, name) for name in self.transports},
            acks={
                name: emoji
                for name in self.transports
                if (emoji := getattr(getattr(config, name, None), "ack_reaction", ""))
            },
        )
        if approvals is not None:
            approvals.notify = router.notify
        self._media.admits = router.admission.takes_files
        return router

    def _scheduler(self, router: Router, backend: Backend) -> Scheduler:
        cron = self.config.cron
        store = backend.store
        agent = router.agent  # its turns run unattended: a call that would ask is denied
        if cron.approver is not None:
            approver = build_approver(self.config, section=cron.approver)
            agent = build_agent(
                self.config,
                router.agent.provider,
                store,
                registry=self._registry,
                approver=approver,
            )
        runner = CronRunner(
            agent=agent,
            agents=router.agents,
            store=store,
            notify=router.notify,
            timeout=cron.timeout,
            notify_failures=cron.notify_failures,
        )
        scheduler = Scheduler(jobs=backend.jobs, runner=runner, poll_interval=cron.poll_interval)
        self._cron_tool.on_change = scheduler.wake
        return scheduler

    async def _serve(
        self,
        router: Router,
        scheduler: Scheduler,
        listeners: dict[str, MultiListener[SocketStream]],
        backend: Backend,
    ) -> None:
        """Everything runs in one task group until a signal or stop(); then a graceful stop."""
        config = self.config
        cluster = backend.cluster
        if cluster is not None:  # a page's reply goes out where the page is connected
            cluster.stays = frozenset(
                name for name, t in self.transports.items() if Abilities.of(t).replies_stay
            )
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._signals)
            await tg.start(router.run)
            await tg.start(scheduler.run)
            if cluster is not None:
                tg.start_soon(cluster.beating)
                tg.start_soon(self._adopt, router, cluster)
                if router.approvals is not None:
                    tg.start_soon(router.approvals.hear)
            for transport in self.transports.values():
                if cluster is not None and not Abilities.of(transport).shares_connections:
                    tg.start_soon(self._elected, transport, router, cluster)
                    continue
                tg.start_soon(self._supervise, transport, router)
                tg.start_soon(router.deliver, transport.name)
            tg.start_soon(self._sweep, router)
            for key, listener in listeners.items():
                face = web.face(
                    self.config if key == "web" else None,
                    health=self.transport_states,
                    metrics=self.metrics,
                    errors=self.errors,
                    transports=self.transports,
                    approvals=router.approvals,
                    scheduler=scheduler,
                    backend=backend,
                    tg=tg,
                )
                tg.start_soon(web.serve, face, listener)
            self._watchdog(tg)
            sd_notify("READY=1")
            log.info("daemon.ready")
            await self._stop.wait()
            sd_notify("STOPPING=1")
            log.info("daemon.stopping", grace=config.shutdown_grace)
            with anyio.move_on_after(CLOSE_TIMEOUT):
                async with anyio.create_task_group() as stopping:
                    for transport in self.transports.values():
                        stopping.start_soon(_quietly, transport.stop)
            await router.drain(config.shutdown_grace)
            tg.cancel_scope.cancel()

    def stop(self) -> None:
        self._stop.set()

    async def _elected(
        self, transport: Transport, router: Router, cluster: PostgresDaemonState
    ) -> None:
        """Where daemons share the state, a transport that allows one connection only
        (long polling, a sync loop, a linked device) runs on the daemon elected for it, and
        that daemon sends its replies; the others wait to take over."""
        while not self._stop.is_set():
            async with cluster.polling(transport.name) as poller:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._supervise, transport, router)
                    tg.start_soon(router.deliver, transport.name)
                    await poller.lost()
                    tg.cancel_scope.cancel()
            await _quietly(transport.stop)

    async def _adopt(self, router: Router, cluster: PostgresDaemonState) -> None:
        """Answer what a dead daemon of the cluster accepted and left unanswered."""
        while True:
            await anyio.sleep(cluster.lease / 3)
            try:
                router.adopt(await cluster.orphans())
            except Exception as exc:  # the database is away: the next round tries again
                log.warning("cluster.adopt_failed", error=str(exc))

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                log.info("daemon.signal", signal=signal.Signals(sig).name)
                self.stop()
                return

    async def _supervise(self, transport: Transport, router: Router) -> None:
        """Keep one transport running; failures restart it with capped exponential backoff.
        A rejected credential stops it for good (its health stays red)."""
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                await transport.run(router.submit)
            except TransportAuthError as exc:
                log.error("transport.stopped", transport=transport.name, error=str(exc))
                self.stopped[transport.name] = str(exc)
                return
            except Exception as exc:
                if self._stop.is_set():
                    return
                self.errors[transport.name] = str(exc) or type(exc).__name__
                log.error(
                    "transport.failed",
                    transport=transport.name,
                    error=str(exc) or type(exc).__name__,
                    exc_info=not isinstance(exc, ConnectionError),
                )
            if self._stop.is_set():
                return
            if time.monotonic() - started > 60:
                failures = 0
            failures += 1
            delay = backoff(failures - 1, cap=BACKOFF_CAP)
            log.info(
                "transport.restart",
                transport=transport.name,
                attempt=failures,
                delay=round(delay, 2),
            )
            await anyio.sleep(delay)

    def transport_states(self) -> dict[str, dict[str, Any]]:
        """Each transport: connected or not, and why it stopped if it stopped for good."""
        states: dict[str, dict[str, Any]] = {}
        for name, transport in self.transports.items():
            states[name] = {"connected": transport.connected}
            if name in self.stopped:
                states[name]["stopped"] = self.stopped[name]
        return states

    async def _publish(self, lock: DaemonLock) -> None:
        """Keep what `rousseau status` reads up to date (written when it changes)."""
        last: dict[str, dict[str, Any]] | None = None
        while True:
            states = self.transport_states()
            if states != last:
                try:
                    await anyio.to_thread.run_sync(lock.publish, states)
                    last = states
                except OSError as exc:
                    log.warning("daemon.publish_failed", error=str(exc))
            await anyio.sleep(PUBLISH_EVERY)

    async def _sweep(self, router: Router) -> None:
        """The retention sweep: soon after start, then every `state.retention.interval`."""
        ages = self.config.state.retention
        await anyio.sleep(min(FIRST_SWEEP, ages.interval))
        while True:
            try:
                deleted = await router.state.sweep(ages)
                keep = await router.state.media_in_use()
                prune = functools.partial(
                    self._media.blobs.prune_sync, keep, older_than=time.time() - BLOB_GRACE
                )
                deleted["media"] = await anyio.to_thread.run_sync(prune)
                for table, count in deleted.items():
                    if count:
                        self.metrics.pruned.labels(table).inc(count)
                log.info("daemon.swept", **deleted)
            except Exception as exc:
                log.warning("daemon.sweep_failed", error=str(exc))
            await anyio.sleep(ages.interval)

    def _watchdog(self, tg: TaskGroup) -> None:
        usec = os.environ.get("WATCHDOG_USEC")
        if not usec or not usec.isdigit():
            return

        async def ping() -> None:
            while True:
                sd_notify("WATCHDOG=1")
                await anyio.sleep(int(usec) / 2e6)

        tg.start_soon(ping)


def _ask(approvals: ChatApprovals | None, config: Config) -> AskFn | None:
    """How the agent `config.agent` describes puts a question to its own approver's owners
    in chat; None where it has no approver (its default rules ask no one)."""
    ac = config.agent.approver
    if approvals is None or ac is None:
        return None
    return approvals.asking(ac.owners, ac.approval_timeout)


async def _built(provider: LazyProvider, started: Callable[[], None]) -> None:
    """Build the provider; one that cannot be built (a missing key, a missing extra) stops
    the daemon with that error, as it would have before anything started. Start-up is over
    once it is built (see _startup_objects_frozen)."""
    await provider.get()
    started()


async def _listen(section: HealthConfig, key: str) -> MultiListener[SocketStream]:
    host, port = section.address
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:  # taken, or an address this machine does not have
        reason = exc.strerror or str(exc)
        raise ConfigError(f"{key}.listen: cannot listen on {section.listen}: {reason}") from None
    log.info(f"daemon.{key}", listen=section.listen)
    return listener


@contextlib.contextmanager
def _startup_objects_frozen() -> Iterator[Callable[[], None]]:
    """No garbage collection while the daemon starts; the call it yields freezes what start-up
    made (some 80,000 long-lived objects: config, SDK modules, the registry) out of the
    collector's reach. A full collection walking them held the event loop 50-110 ms under
    load; frozen, collections only walk what the messages create.

    Those still include the sessions held in memory (three objects a message, tens of
    thousands under load), which a full collection walks to find nothing to free: 20-40 ms
    of held loop, the tail of reply latency at 100 messages a second. So full collections
    come after FULL_COLLECTION_EVERY collections of the middle generation instead of
    Python's 10; young garbage is collected as before. Left as found on exit."""
    if not gc.isenabled():  # the caller manages collection (or another daemon starts)
        yield lambda: None
        return
    thresholds = gc.get_threshold()

    def started() -> None:
        gc.freeze()
        gc.set_threshold(thresholds[0], thresholds[1], FULL_COLLECTION_EVERY)
        gc.enable()

    gc.disable()
    try:
        yield started
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
        gc.unfreeze()


def run(config: Config, only: str | None = None) -> int:
    """Entry point for `rousseau run` and `rousseau <transport>`."""
    daemon = Daemon(config, only=only)
    return anyio.run(daemon.run)


def _stream_settings(config: Config, name: str) -> StreamSettings:
    """A transport's streaming settings, from its section (the defaults without one)."""
    if name in web.STREAMING:
        return web.STREAMING[name]
    section = getattr(config, name, None)
    if section is None or not hasattr(section, "streaming"):
        return StreamSettings()
    return StreamSettings(streaming=section.streaming, progress=section.progress)
