"""Keeping a running daemon in order: applying a changed config (`rousseau reload`, SIGHUP),
scheduled backups, the alerts, and letting go of the store's pre-upgrade copies."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog

from rousseau.agent import RousseauError
from rousseau.alerts import Alerts
from rousseau.config import Config
from rousseau.mcp.client import MCPConnection, mcp_tools
from rousseau.policy import chat_policies as configured_policies
from rousseau.transports import build_transports
from rousseau.transports.abilities import Abilities, TakesFiles

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus

    from rousseau.media import MediaIntake
    from rousseau.metrics import Metrics
    from rousseau.policy import ChatPolicy
    from rousseau.tools import Shared
    from rousseau.transports.base import Transport

log = structlog.get_logger("rousseau.daemon")

Parts = Any
"""The daemon's parts (rousseau.assembly.Parts; the assembly is the daemon's to import)."""
Apply = Callable[[Any, Config], Awaitable[list[str]]]
"""How a config is applied to the parts (rousseau.assembly.reload.reload)."""


class Daemon(Protocol):
    """What upkeep needs of the running daemon (rousseau.daemon.Daemon)."""

    config: Config
    parts: Any
    transports: dict[str, Transport]
    chat_policies: dict[str, ChatPolicy]
    given_policies: dict[str, ChatPolicy]
    given_transports: bool
    reloaded: dict[str, Any]
    reloading: anyio.Lock
    stopped: dict[str, str]
    errors: dict[str, str]
    scopes: dict[str, anyio.CancelScope]
    serving: TaskGroup | None
    media: MediaIntake
    metrics: Metrics
    mcp: MCPServers | None

    def transport_states(self) -> dict[str, dict[str, Any]]: ...

    async def serve_scoped(self, transport: Transport, parts: Any) -> None: ...


class MCPServers:
    """The configured MCP servers, connected while the daemon serves, their tools in every
    agent's registry (`shared`); restarted whole when a reload changes them."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.connections: list[MCPConnection] = []
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._done.set()

    async def run(
        self, servers: dict[str, Any], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect `servers` (each tried once before this says it started) and keep them
        connected until stopped; then take their tools back out of the registries."""
        self._stop, self._done = anyio.Event(), anyio.Event()
        try:
            async with mcp_tools(servers, self.shared) as connections:
                self.connections = connections
                task_status.started()
                await self._stop.wait()
                for connection in connections:
                    for name in connection.tools:
                        self.shared.unregister(name)
        finally:
            self._done.set()

    async def restart(self, servers: dict[str, Any], tg: TaskGroup) -> None:
        """The running servers stopped (their tools gone), then `servers` connected."""
        self._stop.set()
        await self._done.wait()
        await tg.start(self.run, servers)
        log.info("mcp.restarted", servers=sorted(servers))


async def quietly(fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    except Exception as exc:
        log.warning("daemon.stop_failed", error=str(exc) or type(exc).__name__)


STARTED = time.time()
"""When this process started (copies of the store made before it are an earlier start's)."""

LIVE_KEYS = frozenset({"allowlist", "policy", "require_mention", "reply_header", "agent"})
"""A transport's keys a reload applies without touching it (chat policies and routes)."""
ROUTER_KEYS = frozenset({"streaming", "progress", "ack_reaction", "voice_replies"})
"""A transport's keys the router fixes at start-up: a change needs a restart."""


def _section(config: Config, name: str) -> dict[str, Any] | None:
    section = config.transport_sections().get(name)
    return None if section is None else section.model_dump()


async def reload(daemon: Daemon, apply: Apply) -> bool:
    """The config file read again and, if it is good, applied to the running daemon (see
    rousseau.assembly.reload): what changes live changes, a transport whose own section
    changed is restarted alone, and what needs a restart is named. A broken file
    changes nothing. Whether it was applied."""
    async with daemon.reloading:
        try:
            new = await anyio.to_thread.run_sync(daemon.config.reread)
        except RousseauError as exc:
            log.error("config.reload_refused", error=str(exc), kept=daemon.reloaded["digest"])
            _reloaded(daemon, ok=False, error=str(exc))
            return False
        parts = daemon.parts
        if parts is None:
            _reloaded(daemon, ok=False, error="the daemon is still starting")
            return False
        old = daemon.config
        try:
            needs = await apply(parts, new)
        except Exception as exc:  # a part the new config cannot build: keep the old
            log.error("config.reload_failed", error=str(exc) or type(exc).__name__)
            _reloaded(daemon, ok=False, error=str(exc) or type(exc).__name__)
            return False
        daemon.chat_policies.clear()
        daemon.chat_policies.update({**configured_policies(new), **daemon.given_policies})
        if new.mcp_servers != old.mcp_servers and daemon.mcp is not None and daemon.serving:
            await daemon.mcp.restart(dict(new.mcp_servers), daemon.serving)
        daemon.config = new
        if parts.backend.cluster is not None:  # told to the others with the next beat
            parts.backend.cluster.config = new.digest()
        restarted, more = await _restart_changed(daemon, old, new, parts)
        needs += more
        for line in needs:
            log.warning("config.needs_restart", change=line)
        log.info("config.reloaded", digest=new.digest(), restarted=restarted)
        _reloaded(daemon, ok=True, needs=needs, restarted=restarted)
        return True


def _reloaded(daemon: Daemon, **how: Any) -> None:
    daemon.reloaded = {"digest": daemon.config.digest(), "at": time.time(), **how}


async def _restart_changed(
    daemon: Daemon, old: Config, new: Config, parts: Parts
) -> tuple[list[str], list[str]]:
    """Each transport whose own section changed (beyond who may talk and how a group
    is answered, which apply live) stopped and built again from its new section; the
    ones restarted, and what needs a whole restart instead."""
    restarted: list[str] = []
    needs: list[str] = []
    for name in list(daemon.transports):
        was, now = _section(old, name), _section(new, name)
        if was == now:
            continue
        if was is None or now is None:
            needs.append(f"{name}: a transport added or removed")
            continue
        changed = {k for k in was.keys() | now.keys() if was.get(k) != now.get(k)}
        if changed <= LIVE_KEYS:
            continue
        if changed & ROUTER_KEYS or daemon.given_transports:  # (a caller's: not rebuilt)
            keys = ", ".join(sorted(changed - LIVE_KEYS))
            needs.append(f"{name}: {keys}")
            continue
        if Abilities.of(daemon.transports[name]).posts is not None:
            needs.append(f"{name}: its section (it takes posts on the daemon's server)")
            continue
        try:
            await _restart_transport(daemon, name, new, parts)
        except RousseauError as exc:  # its new section builds no transport: the old one stays
            log.error("config.transport_kept", transport=name, error=str(exc))
            needs.append(f"{name}: its new section was refused ({exc}); it runs on the old one")
            continue
        restarted.append(name)
    for name in new.transport_sections().keys() - daemon.transports.keys():
        needs.append(f"{name}: a transport added or removed")
    return restarted, needs


async def _restart_transport(daemon: Daemon, name: str, config: Config, parts: Parts) -> None:
    """The transport stopped, its serving (and its outbox's delivery) ended, and a new
    one built from `config` served in its place; what it had not acknowledged its
    platform sends again, and its outbox is delivered by the new one."""
    from rousseau.transports.unreadable import count_refused

    fresh = build_transports(config, name)[name]  # (a ConfigError before anything stops)
    fresh.bind_state(parts.backend.transport_state(name))
    count_refused(fresh, daemon.metrics.failed_inbound.labels(name).inc)
    if isinstance(fresh, TakesFiles):
        fresh.bind_media(daemon.media)
    old = daemon.transports[name]
    await quietly(old.stop)
    scope = daemon.scopes.pop(name, None)
    if scope is not None:
        scope.cancel()
    await quietly(old.aclose)
    daemon.transports[name] = fresh  # the router's map too: it is the same dict
    daemon.stopped.pop(name, None)
    daemon.errors.pop(name, None)
    assert daemon.serving is not None
    daemon.serving.start_soon(daemon.serve_scoped, fresh, parts)
    log.info("config.transport_restarted", transport=name)


async def prune_upgrade_copies(config: Config) -> None:
    """The store's copies kept before an earlier start migrated it, deleted: this start
    went well (the ones this start made wait for the next)."""
    from rousseau.state.backup import prune_upgrade_copies

    try:
        gone = await anyio.to_thread.run_sync(prune_upgrade_copies, config, STARTED)
    except OSError as exc:
        log.warning("store.copies_not_pruned", error=str(exc))
        return
    if gone:
        log.info("store.copies_pruned", paths=gone)


def alerts_for(daemon: Daemon, parts: Parts) -> Alerts:
    """What tells the owner, on another transport, what needs them (see rousseau.alerts)."""
    state = Path(daemon.config.state.path).expanduser().parent
    folders = [daemon.media.blobs.folder] if daemon.config.state.url else [state]
    alerts = Alerts(
        config=lambda: daemon.config,
        notify=parts.router.notify,
        states=lambda: {
            name: {**state, "error": daemon.errors.get(name, "")}
            for name, state in daemon.transport_states().items()
        },
        connected=lambda name: name in daemon.transports and daemon.transports[name].connected,
        metrics=daemon.metrics,
        kv=parts.backend.transport_state("alerts"),
        folders=folders,
    )
    if parts.meter is not None:
        parts.meter.alert = alerts.budget
    return alerts


async def backups(daemon: Daemon) -> None:
    """A backup every `backup.every` (read anew each time: a reload may change it) into
    `backup.dir`, the oldest beyond `backup.keep` deleted."""
    from rousseau.state.backup import scheduled

    while True:
        every = daemon.config.backup.every
        if not every:
            await anyio.sleep(60)
            continue
        await anyio.sleep(every)
        try:
            made, manifest, gone = await scheduled(daemon.config)
            log.info("backup.made", path=str(made), rows=manifest.rows, deleted=gone)
        except Exception as exc:
            log.error("backup.failed", error=str(exc) or type(exc).__name__)
