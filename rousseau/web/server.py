"""Serving an ASGI app with uvicorn inside the daemon's task group, on sockets the daemon
bound itself (so a taken port is a config error named before anything starts)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import structlog
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = structlog.get_logger("rousseau.web")

IDLE_TIMEOUT = 5.0
"""Seconds a connection may stay open before its first request (and between requests)."""
BACKLOG = 16
"""Connections waiting to be accepted; also how many the loop accepts in one go, before
those past the cap are closed (so a flood holds at most the cap plus this many)."""
SHUTDOWN_GRACE = 2.0
"""At a stop: how long open requests (a live page's event stream) get to end."""


def capped(connections: int) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, turning away connections past `connections` at once and
    closing one that sends nothing for IDLE_TIMEOUT: a flood of idle connections costs a
    few file descriptors, never the daemon's (uvicorn itself waits for the first request
    without a limit)."""

    class Capped(H11Protocol):
        turned_away = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= connections:
                self.turned_away = True
                transport.abort()
                return
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(
                IDLE_TIMEOUT, self.timeout_keep_alive_handler
            )

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.turned_away:  # one turned away was never taken on
                super().connection_lost(exc)

    return Capped


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The daemon handles SIGTERM and SIGINT itself; uvicorn must not take them over."""
        yield


async def serve(app: Any, sockets: list[socket.socket], *, connections: int) -> None:
    """Serve `app` on the bound `sockets` until cancelled; then stop taking connections and
    give open requests SHUTDOWN_GRACE to end."""
    config = uvicorn.Config(
        app,
        http=capped(connections),
        backlog=BACKLOG,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=int(IDLE_TIMEOUT),
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
        proxy_headers=True,  # X-Forwarded-Proto from a proxy on this host: https cookies
    )
    server = _Server(config)
    config.load()
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=sockets)
    try:
        await anyio.sleep_forever()
    finally:
        server.should_exit = server.force_exit = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE + 1):
            await server.shutdown(sockets=sockets)
