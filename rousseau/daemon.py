"""The supervisor: the parts `assemble` builds from the config, run in one task group.

Each transport runs as a supervised task restarted with backoff, so one failing platform never
stops the others. SIGTERM/SIGINT stop intake, give in-flight turns `shutdown_grace` to finish,
close the transports and checkpoint the WAL.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog
from anyio.abc import SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

from rousseau import upkeep, web
from rousseau.agent import Provider, TransportAuthError
from rousseau.assembly import VOICE_HINT, Parts, SupportsAclose, assemble, media_intake
from rousseau.backoff import backoff
from rousseau.config import Config
from rousseau.log import duration
from rousseau.metrics import LagProbe, Metrics
from rousseau.policy import ChatPolicy
from rousseau.policy import chat_policies as configured_policies
from rousseau.process import FULL_COLLECTION_EVERY, sd_notify, startup_objects_frozen, watchdog
from rousseau.providers.lazy import LazyProvider
from rousseau.router import Router
from rousseau.state.backend import Backend, open_backend
from rousseau.state.cluster import elected
from rousseau.state.lock import DaemonLock
from rousseau.tools import Shared
from rousseau.transports import build_transports
from rousseau.transports.abilities import Abilities
from rousseau.transports.base import Transport
from rousseau.upkeep import quietly

__all__ = ["FULL_COLLECTION_EVERY", "VOICE_HINT", "Daemon", "run", "sd_notify"]

log = structlog.get_logger("rousseau.daemon")

BACKOFF_CAP = 300.0
CLOSE_TIMEOUT = 5.0
"""At shutdown, the longest any one close (a transport, the provider, the store) may take."""
FIRST_SWEEP = 30.0
BLOB_GRACE = 3600.0
"""Seconds a stored file is kept before the sweep may delete it unused (a file stored for a
message is recorded with it within moments)."""
Listeners = dict[str, MultiListener[SocketStream]]  # the HTTP servers', by key
PUBLISH_EVERY = 2.0
"""How often the transports' state is looked at for `rousseau status` (written on change)."""


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
        self.given_transports = transports is not None
        self.transports = transports if transports is not None else build_transports(config, only)
        self.given_policies = dict(chat_policies or {})
        self.chat_policies = {**configured_policies(config), **self.given_policies}
        self.media = media_intake(config)
        """Where the transports put inbound files, and where the sweep finds the blob store."""
        self.metrics = Metrics()
        self.lag = LagProbe(self.metrics)
        self._stop = anyio.Event()
        self.stopped: dict[str, str] = {}
        """Transports stopped for good (a rejected credential), with the reason."""
        self.errors: dict[str, str] = {}
        """Each transport's last failure (it was restarted after it)."""
        self.forced = False
        """A second signal ended the graceful stop."""
        self.parts: Parts | None = None
        self.mcp: upkeep.MCPServers | None = None
        self.serving: TaskGroup | None = None
        self.scopes: dict[str, anyio.CancelScope] = {}
        """Each transport's serving, to restart one alone when its section changes."""
        self.reloading = anyio.Lock()
        self.reloaded: dict[str, Any] = {"digest": config.digest()}
        """What `rousseau status` and `rousseau reload` read: the config's digest, and how
        the last reload went."""

    async def run(self) -> int:
        config = self.config
        # First of all: a second daemon on this database leaves before it touches anything;
        # next the servers' ports, which, taken or not this machine's, are a config error to
        # name before anything starts.
        if config.web is not None:
            web.check_installed()
        lock = DaemonLock(config.state.path)
        await anyio.to_thread.run_sync(lock.acquire)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(lock.release)
            listeners: Listeners = {}
            for key, address in web.servers(config, self.transports).items():
                listener = await web.listen(address, key)
                listeners[key] = await stack.enter_async_context(listener)
            started = stack.enter_context(startup_objects_frozen())
            async with anyio.create_task_group() as probes:
                probes.start_soon(self.lag.run)
                probes.start_soon(self._publish, lock)
                # Blocking work (opening SQLite, imports, probes) runs on threads.
                backend = await open_backend(config)
                parts: Parts | None = None
                try:
                    parts = await assemble(
                        config,
                        backend,
                        self.transports,
                        media=self.media,
                        metrics=self.metrics,
                        policies=self.chat_policies,
                        provider=self.provider,
                    )
                    probes.start_soon(_built, parts.provider, started)
                    self.parts = parts
                    await self._serve(parts, listeners)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._close(parts, backend)
                probes.cancel_scope.cancel()
        log.info("daemon.stopped", forced=self.forced)
        return 130 if self.forced else 0

    async def _close(self, parts: Parts | None, backend: Backend) -> None:
        """Close every transport, the providers, the transcriber, the speech client and the
        tools holding a client (the web tools'), each given a few seconds, a failure never
        skipping the rest; then checkpoint and close the store."""
        providers = parts.providers if parts is not None else []
        registries = parts.registries if parts is not None else []
        tools = {id(t): t for r in registries for t in map(r.get, r.names())}

        async def close(what: str, aclose: Callable[[], Awaitable[None]]) -> None:
            try:
                with anyio.fail_after(CLOSE_TIMEOUT):
                    await aclose()
            except Exception as exc:  # TimeoutError included: a hung close is left behind
                log.warning("daemon.close_failed", what=what, error=str(exc) or type(exc).__name__)

        async with anyio.create_task_group() as tg:
            for name, transport in self.transports.items():
                tg.start_soon(close, name, transport.aclose)
            for each in (self.provider, *providers):
                if isinstance(each, SupportsAclose):
                    tg.start_soon(close, "provider", each.aclose)
            if isinstance(transcriber := self.media.transcriber, SupportsAclose):
                tg.start_soon(close, "transcriber", transcriber.aclose)
            if parts is not None and parts.indexer is not None:
                tg.start_soon(close, "embeddings", parts.indexer.embeddings.aclose)
            speech = parts.router.speech if parts is not None else None
            if speech is not None and isinstance(speech.speaker, SupportsAclose):
                tg.start_soon(close, "speech", speech.speaker.aclose)
            for tool in tools.values():
                if isinstance(tool, SupportsAclose):
                    tg.start_soon(close, f"tool {tool.name}", tool.aclose)
        await backend.aclose()

    async def _serve(self, parts: Parts, listeners: Listeners) -> None:
        """Everything runs in one task group until a signal or stop(); then a graceful stop,
        cut short by a second signal."""
        router, cluster = parts.router, parts.backend.cluster
        async with anyio.create_task_group() as tg:
            self.serving = tg
            parts.shared = Shared(parts.registries)
            self.mcp = upkeep.MCPServers(parts.shared)
            await tg.start(self.mcp.run, dict(parts.config.mcp_servers))
            tg.start_soon(self._signals, router, tg.cancel_scope)
            tg.start_soon(self._hangups)
            await tg.start(router.run)
            await tg.start(parts.scheduler.run)
            if cluster is not None:
                tg.start_soon(cluster.beating)
                if router.approvals is not None:
                    tg.start_soon(router.approvals.hear)
            for transport in self.transports.values():
                tg.start_soon(self.serve_scoped, transport, parts)
            tg.start_soon(self._sweep, router)
            tg.start_soon(upkeep.backups, self)
            tg.start_soon(upkeep.alerts_for(self, parts).run)
            if parts.indexer is not None:
                tg.start_soon(parts.indexer.run)
            for key, listener in listeners.items():
                serve = parts.server(key, health=self.transport_states, errors=self.errors, tg=tg)
                tg.start_soon(serve, listener)
            watchdog(tg)
            sd_notify("READY=1")
            log.info("daemon.ready")
            tg.start_soon(upkeep.prune_upgrade_copies, self.config)
            await self._stop.wait()
            sd_notify("STOPPING=1")
            log.info("daemon.stopping", grace=self.config.shutdown_grace)
            with anyio.move_on_after(CLOSE_TIMEOUT):
                async with anyio.create_task_group() as stopping:
                    for transport in self.transports.values():
                        stopping.start_soon(quietly, transport.stop)
            grace = self.config.shutdown_grace
            deadline = anyio.current_time() + grace
            with anyio.move_on_after(grace):  # a cron run's reply is queued like a turn's
                await parts.scheduler.settle()
            await router.drain(max(0.0, deadline - anyio.current_time()))
            tg.cancel_scope.cancel()

    def stop(self) -> None:
        self._stop.set()

    async def _signals(self, router: Router, serving: anyio.CancelScope) -> None:
        """The first SIGTERM or SIGINT stops gracefully, saying what it waits for; a second
        quits now. What was not answered then is answered at the next start."""
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                name = signal.Signals(sig).name
                if self._stop.is_set():
                    log.warning("daemon.quit_now", signal=name, chats_unanswered=router.chats_busy)
                    self.forced = True
                    serving.cancel()
                    return
                log.info("daemon.signal", signal=name)
                self.stop()
                if sig == signal.SIGINT and sys.stderr.isatty():  # a person at a terminal
                    sys.stderr.write(_stopping(router.chats_busy, self.config.shutdown_grace))

    async def _hangups(self) -> None:
        """SIGHUP reloads the config (as `rousseau reload` asks)."""
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                try:
                    await self.reload()
                except Exception as exc:  # a reload never takes the daemon down
                    log.error("config.reload_failed", error=str(exc) or type(exc).__name__)

    async def reload(self) -> bool:
        """The config file read again and, if it is good, applied (see rousseau.upkeep)."""
        from rousseau.assembly.reload import reload

        applied: bool = await upkeep.reload(self, reload)
        return applied

    async def serve_scoped(self, transport: Transport, parts: Parts) -> None:
        with anyio.CancelScope() as scope:
            self.scopes[transport.name] = scope
            await self._serve_transport(transport, parts)

    async def _serve_transport(self, transport: Transport, parts: Parts) -> None:
        """A transport, supervised, and the delivery of its replies; where daemons share the
        state and it allows one connection only, on the daemon elected for it."""

        router, cluster = parts.router, parts.backend.cluster

        async def serve() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._supervise, transport, router)
                await router.deliver(transport.name)

        if cluster is None or Abilities.of(transport).shares_connections:
            return await serve()
        stop = functools.partial(quietly, transport.stop)
        await elected(cluster, transport.name, serve, stop=stop, stopping=self._stop.is_set)

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
        last: dict[str, Any] | None = None
        while True:
            states = self.transport_states()
            now = {"transports": states, "config": self.reloaded}
            if now != last:
                try:
                    await anyio.to_thread.run_sync(lock.publish, states, self.reloaded)
                    last = now
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
                    self.media.blobs.prune_sync, keep, older_than=time.time() - BLOB_GRACE
                )
                deleted["media"] = await anyio.to_thread.run_sync(prune)
                for table, count in deleted.items():
                    if count:
                        self.metrics.pruned.labels(table).inc(count)
                log.info("daemon.swept", **deleted)
            except Exception as exc:
                log.warning("daemon.sweep_failed", error=str(exc))
            await anyio.sleep(ages.interval)


async def _built(provider: Provider, started: Callable[[], None]) -> None:
    """Build a lazy provider; one that cannot be built (a missing key, a missing extra) stops
    the daemon with that error, as it would have before anything started. Start-up is over
    once it is built (see startup_objects_frozen)."""
    if isinstance(provider, LazyProvider):
        await provider.get()
    started()


def run(config: Config, only: str | None = None) -> int:
    """Entry point for `rousseau run` and `rousseau <transport>`."""
    daemon = Daemon(config, only=only)
    return anyio.run(daemon.run)


def _stopping(busy: int, grace: float) -> str:
    """What a person who pressed Ctrl-C reads while the daemon stops."""
    chats = f"{busy} chat{'s' * (busy != 1)}" if busy else "no chat"
    return (
        f"Stopping: {chats} being answered; their replies go out first "
        f"(at most {duration(grace)}). Press Ctrl-C again to quit now: what is left "
        "unanswered is answered at the next start.\n"
    )
