"""The web face: one ASGI app (Starlette, served by uvicorn in the daemon's task group)
with /healthz and /metrics, and where `web:` is set the owner's dashboard, the web chat and
the OpenAI-compatible API.

This module stays light (the daemon imports it at start); the framework is imported on a
thread when the server starts, while the transports connect.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import anyio
import structlog
from anyio.abc import SocketAttribute

from rousseau.streaming import StreamSettings
from rousseau.web.face import Face, face

if TYPE_CHECKING:
    from anyio.abc import SocketStream
    from anyio.streams.stapled import MultiListener

    from rousseau.config import HealthConfig

__all__ = [
    "CHOOSE_AGENT",
    "CONNECTIONS",
    "HEALTH_CONNECTIONS",
    "STREAMING",
    "Face",
    "check_installed",
    "face",
    "listen",
    "serve",
]

_log = structlog.get_logger("rousseau.web")

STREAMING = {
    "web": StreamSettings(progress="tools", interval=0.25),
    "api": StreamSettings(progress="off", interval=0.25),
}
"""How replies stream to a web page and to an API call: four updates a second (the page
shows tool progress too)."""
CHOOSE_AGENT = frozenset({"api"})
"""Transports whose messages name their agent (the API: the model asked for)."""
CONNECTIONS = 64
"""Connections served at once (a dashboard's live view holds one); more are closed at once."""
HEALTH_CONNECTIONS = 32
"""The same for a server of /healthz and /metrics alone."""


def check_installed() -> None:
    """Before anything starts, where `web:` is set: the web extra is installed."""
    import importlib.util

    from rousseau.agent import MissingExtraError

    for module in ("jinja2", "multipart", "argon2"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError("the web face (web:)", "web")


async def listen(section: HealthConfig, key: str) -> MultiListener[SocketStream]:
    """The bound listener of `section` (`health` or `web`), before anything starts: an
    address taken, or not this machine's, is a config error naming `key`.listen."""
    from rousseau.agent import ConfigError

    host, port = section.address
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:  # taken, or an address this machine does not have
        reason = exc.strerror or str(exc)
        raise ConfigError(f"{key}.listen: cannot listen on {section.listen}: {reason}") from None
    _log.info(f"daemon.{key}", listen=section.listen)
    return listener


def _framework() -> None:
    for name in ("rousseau.web.app", "rousseau.web.server"):
        importlib.import_module(name)


async def serve(face: Face, listener: MultiListener[SocketStream]) -> None:
    """Serve the face on the daemon's bound `listener` until cancelled."""
    await anyio.to_thread.run_sync(_framework)
    from rousseau.web.app import build
    from rousseau.web.server import serve as serve_app

    sockets = [one.extra(SocketAttribute.raw_socket) for one in listener.listeners]
    connections = CONNECTIONS if face.config is not None else HEALTH_CONNECTIONS
    await serve_app(build(face), sockets, connections=connections)
