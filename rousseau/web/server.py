"""Serving an ASGI app with uvicorn inside the daemon's task group, on sockets the daemon
bound itself (so a taken port is a config error named before anything starts).

Each server has a room of its own: at most `connections` at once, `per_address` of them from
one client address (a trusted proxy counts against the total only), and HEAD_TIMEOUT for
every request head however it is trickled. When the room (or an address's share) is full, the
connection that has waited longest for its request head gives up its place; a newcomer is
turned away only when every place is in a request. A slowloris thus holds places only while
no real request needs them, and one server's flood never touches another's room.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import anyio
import h11
import structlog
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from rousseau.web import clients

log = structlog.get_logger("rousseau.web")

HEAD_TIMEOUT = 5.0
"""Seconds a client has to send a whole request head, from connecting or from the end of
its last response. Trickled bytes do not stretch it (uvicorn's own idle timer starts again
at each byte, so a client sending a header line every 2 s was never closed)."""
BACKLOG = 16
"""Connections waiting to be accepted; also how many the loop accepts in one go, before
those past the cap are closed (so a flood holds at most the cap plus this many)."""
SHUTDOWN_GRACE = 2.0
"""At a stop: how long open requests (a live page's event stream) get to end."""


class Room:
    """The places of one server's connections: how many are held in all and per client
    address, and which wait for a request head (the longest waiting first)."""

    def __init__(self, connections: int, per_address: int) -> None:
        self.connections = connections
        self.per_address = per_address
        self.held: dict[Any, str] = {}
        """Each connection held, with the address it counts against ("" for a proxy)."""
        self.by_address: Counter[str] = Counter()
        self.waiting: dict[Any, Callable[[], None]] = {}
        """The connections waiting for a request head (in the order they began to wait),
        each with how it is closed."""

    def take(self, connection: Any, address: str) -> bool:
        """A place for a new connection from `address` ("" for a trusted proxy), made by
        closing a waiting one if need be; False if every place is in a request."""
        if address and self.by_address[address] >= self.per_address:
            if not self._free(lambda held: self.held[held] == address):
                return False
        if len(self.held) >= self.connections and not self._free(lambda held: True):
            return False
        self.held[connection] = address
        if address:
            self.by_address[address] += 1
        return True

    def _free(self, which: Callable[[Any], bool]) -> bool:
        found = next((held for held in self.waiting if which(held)), None)
        if found is None:
            return False
        close = self.waiting[found]
        self.leave(found)
        close()
        return True

    def leave(self, connection: Any) -> None:
        """Give up the connection's place (again is harmless)."""
        self.waiting.pop(connection, None)
        address = self.held.pop(connection, None)
        if address:
            self.by_address[address] -= 1
            if not self.by_address[address]:
                del self.by_address[address]


class Capped(H11Protocol):
    """uvicorn's HTTP/1.1 protocol within a Room (see the module's docstring): a flood of
    idle or trickling connections costs a few file descriptors, never the daemon's, nor the
    places of clients that send a request (uvicorn itself waits for a request head without a
    limit). `capped` makes one for each server."""

    room: ClassVar[Room]
    trusted: ClassVar[Sequence[clients.Network]] = ()
    turned_away = False
    head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        address = "" if clients.trusted(host, self.trusted) else clients.key(host) or "?"
        if not self.room.take(self, address):
            self.turned_away = True
            transport.abort()
            return
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in
            self._head_in()
        elif self.head_deadline is None:  # a body read after its answer: the next head's
            self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:
            self._await_head()  # the next request's

    def connection_lost(self, exc: Exception | None) -> None:
        if self.turned_away:  # never taken on
            return
        self._head_in()
        self.room.leave(self)
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._head_in()
        if self.transport.is_closing():
            return
        self.room.waiting[self] = self.transport.abort
        self.head_deadline = self.loop.call_later(HEAD_TIMEOUT, self._too_slow)

    def _head_in(self) -> None:
        self.room.waiting.pop(self, None)
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _too_slow(self) -> None:
        self.head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.abort()


def capped(
    connections: int, per_address: int, trusted: Sequence[clients.Network] = ()
) -> type[Capped]:
    """The protocol of one server: a Room of its own, shared by its connections."""
    room = Room(connections, per_address)
    proxies = tuple(trusted)

    class Served(Capped):
        pass

    Served.room, Served.trusted = room, proxies
    return Served


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The daemon handles SIGTERM and SIGINT itself; uvicorn must not take them over."""
        yield


async def serve(
    app: Any,
    sockets: list[socket.socket],
    *,
    connections: int,
    per_address: int,
    trusted: Sequence[clients.Network] = (),
) -> None:
    """Serve `app` on the bound `sockets` until cancelled; then stop taking connections and
    give open requests SHUTDOWN_GRACE to end. X-Forwarded-For and X-Forwarded-Proto are
    read from the `trusted` proxies alone (uvicorn's own default trusts loopback: any local
    process, the agent's bash tool among them)."""
    config = uvicorn.Config(
        app,
        http=capped(connections, per_address, trusted),
        ws="none",
        backlog=BACKLOG,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=int(HEAD_TIMEOUT),
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
        proxy_headers=bool(trusted),
        forwarded_allow_ips=[str(network) for network in trusted],
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
