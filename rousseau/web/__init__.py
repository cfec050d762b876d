"""The web face: one ASGI app (Starlette, served by uvicorn in the daemon's task group)
with /healthz and /metrics, and where `web:` is set the owner's dashboard, the web chat and
the OpenAI-compatible API; the routes taking the posts of a transport's webhook join the
server of their address (or a server of the same kind, at an address of their own).

This module stays light (the daemon imports it at start); the framework is imported on a
thread when the server starts, while the transports connect.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio
import structlog
from anyio.abc import SocketAttribute

from rousseau.streaming import StreamSettings
from rousseau.transports.abilities import Abilities, Posts
from rousseau.web.face import Face, face

if TYPE_CHECKING:
    from anyio.abc import SocketStream
    from anyio.streams.stapled import MultiListener

    from rousseau.config import Config

__all__ = [
    "CHOOSE_AGENT",
    "CONNECTIONS",
    "HEALTH_CONNECTIONS",
    "HEALTH_PER_ADDRESS",
    "OWNER_SENDER",
    "PER_ADDRESS",
    "STREAMING",
    "Face",
    "address",
    "check_installed",
    "face",
    "listen",
    "posts_at",
    "serve",
    "serve_posts",
    "servers",
]

_log = structlog.get_logger("rousseau.web")

STREAMING = {
    "web": StreamSettings(progress="tools", interval=0.25),
    "api": StreamSettings(progress="off", interval=0.25),
}
"""How replies stream to a web page and to an API call: four updates a second (the page
shows tool progress too)."""
OWNER_SENDER = "web:owner"
"""The owner logged in to the web face, as a `transport:sender` id: an owner of every
approval (they answer on the dashboard anyway)."""
CHOOSE_AGENT = frozenset({"api"})
"""Transports whose messages name their agent (the API: the model asked for)."""
CONNECTIONS = 64
"""Connections served at once (a dashboard's live view holds one); more are closed at once."""
PER_ADDRESS = 16
"""Connections from one client address at once (a browser opens six, and a page's event
stream holds one); a trusted proxy's connections count against CONNECTIONS alone."""
HEALTH_CONNECTIONS = 32
"""CONNECTIONS for a server of /healthz and /metrics alone."""
HEALTH_PER_ADDRESS = 8
"""PER_ADDRESS for a server of /healthz and /metrics alone."""


def check_installed() -> None:
    """Before anything starts, where `web:` is set: the web extra is installed."""
    import importlib.util

    from rousseau.agent import MissingExtraError

    for module in ("jinja2", "multipart", "argon2"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError("the web face (web:)", "web")


def servers(config: Config, transports: Mapping[str, object]) -> dict[str, str]:
    """The HTTP servers the daemon runs, by the config key of their address (host:port):
    health's, the web face's, and one for each address that transports take posts at and
    neither has (a server of the same kind, serving those posts alone)."""
    found = {
        key: section.listen
        for key, section in (("health", config.health), ("web", config.web))
        if section is not None
    }
    for each in _posts(transports):
        at = address(each.listen, f"{each.transport}.webhook")
        if all(address(listen, key) != at for key, listen in found.items()):
            found[f"{each.transport}.webhook"] = each.listen
    return found


def posts_at(listen: str, transports: Mapping[str, object]) -> list[Posts]:
    """The posts that the server of `listen` takes."""
    here = address(listen, "")
    return [p for p in _posts(transports) if address(p.listen, p.transport) == here]


def address(listen: str, key: str) -> tuple[str, int]:
    """The host to bind (an IPv6 host without its brackets; 127.0.0.1 when left empty) and
    the port of `listen`; a config error naming `key`.listen if it is not host:port."""
    from rousseau.agent import ConfigError

    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}.listen: {listen!r} is not host:port (e.g. 127.0.0.1:8443)")
    return host.strip("[]") or "127.0.0.1", int(port)


async def listen(listen: str, key: str) -> MultiListener[SocketStream]:
    """The bound listener of the server at `listen`, before anything starts: an address
    taken, or not this machine's, is a config error naming `key`.listen."""
    from rousseau.agent import ConfigError

    host, port = address(listen, key)
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:  # taken, or an address this machine does not have
        reason = exc.strerror or str(exc)
        raise ConfigError(f"{key}.listen: cannot listen on {listen}: {reason}") from None
    _log.info(f"daemon.{key}", listen=listen)
    return listener


def _posts(transports: Mapping[str, object]) -> list[Posts]:
    return [p for t in transports.values() if (p := Abilities.of(t).posts) is not None]


def _framework() -> None:
    for name in ("rousseau.web.app", "rousseau.web.server"):
        importlib.import_module(name)


async def serve(face: Face, listener: MultiListener[SocketStream]) -> None:
    """Serve the face on the daemon's bound `listener` until cancelled."""
    await anyio.to_thread.run_sync(_framework)
    from rousseau.web.app import build
    from rousseau.web.clients import networks
    from rousseau.web.server import serve as serve_app

    sockets = [one.extra(SocketAttribute.raw_socket) for one in listener.listeners]
    alone = face.config is None and not face.posts  # health alone
    await serve_app(
        build(face),
        sockets,
        connections=HEALTH_CONNECTIONS if alone else CONNECTIONS,
        per_address=HEALTH_PER_ADDRESS if alone else PER_ADDRESS,
        trusted=networks(face.config.trusted_proxies if face.config is not None else ()),
    )


async def serve_posts(posts: list[Posts], listener: MultiListener[SocketStream]) -> None:
    """Serve `posts` alone (their own address) on the bound `listener` until cancelled,
    with the web face's limits."""
    await anyio.to_thread.run_sync(_framework)
    from rousseau.web.app import posts_app
    from rousseau.web.server import serve as serve_app

    sockets = [one.extra(SocketAttribute.raw_socket) for one in listener.listeners]
    await serve_app(posts_app(posts), sockets, connections=CONNECTIONS, per_address=PER_ADDRESS)
