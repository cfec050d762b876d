"""The browser's only way out: a forward proxy on 127.0.0.1 that resolves each host itself,
checks every address against the address rules and connects to the address it checked.

Chromium resolves nothing itself when every request goes through a proxy, so a page cannot
reach an address the rules refuse by a redirect, a script, a subresource or DNS rebinding:
each connection is checked here, after resolution, and pinned to what was checked.
Written here because no well-kept library does checked, pinned forward proxying in-process.
It speaks what Chromium sends a proxy: CONNECT for https (and WebSockets), absolute-URI
requests for plain http.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import ByteReceiveStream, ByteStream, SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from rousseau.tools.web.guard import AddressRules, Refused

log = structlog.get_logger("rousseau.tools.web")

MAX_CONNECTIONS = 128
"""Connections served at once; past it a newcomer is answered 503 and closed."""
HEAD_TIMEOUT = 15.0
"""Seconds a client has to send a whole request head."""
MAX_HEAD = 64 * 1024
CONNECT_TIMEOUT = 15.0
IDLE_TIMEOUT = 120.0
"""Seconds a connection may carry nothing either way before it is closed."""
_REMEMBERED = 256  # refusals kept, newest last
_REMEMBERED_FOR = 300.0  # seconds
_HOP_BY_HOP = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"te", b"upgrade"}
)


class CheckingProxy:
    """One browser's proxy: `start` it, point Chromium at `url`, `aclose` it with the browser.
    `refusal(host, port)` says why a recent connection to that host was refused."""

    def __init__(self, rules: AddressRules) -> None:
        self.rules = rules
        self.port = 0
        self._task: asyncio.Task[None] | None = None
        self.active = 0
        """Connections being served."""
        self._refused: OrderedDict[tuple[str, int], tuple[float, str]] = OrderedDict()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        ready = anyio.Event()

        async def serve() -> None:
            async with listener, anyio.create_task_group() as tg:
                ready.set()
                await listener.serve(self._handle, task_group=tg)

        # The browser's calls come and go; the proxy outlives each, so it runs as a task of
        # its own on the event loop (Playwright's loop: asyncio), cancelled by `aclose`.
        self._task = asyncio.get_running_loop().create_task(serve())
        await ready.wait()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def refusal(self, host: str, port: int) -> str | None:
        """Why a connection to `host`:`port` was refused in the last minutes, or None."""
        found = self._refused.get((host.lower().strip("[]"), port))
        if found is None or time.monotonic() - found[0] > _REMEMBERED_FOR:
            return None
        return found[1]

    def _remember(self, host: str, port: int, why: str) -> None:
        key = (host.lower().strip("[]"), port)
        self._refused[key] = (time.monotonic(), why)
        self._refused.move_to_end(key)
        while len(self._refused) > _REMEMBERED:
            self._refused.popitem(last=False)

    async def _handle(self, client: SocketStream) -> None:
        async with client:
            if self.active >= MAX_CONNECTIONS:
                await _answer(client, 503, "the browser has too many connections open")
                return
            self.active += 1
            try:
                await self._serve(client)
            except Exception as exc:  # one connection's end, never the proxy's
                log.debug("browser.proxy_connection_failed", error=repr(exc))
            finally:
                self.active -= 1

    async def _serve(self, client: SocketStream) -> None:
        reader = BufferedByteReceiveStream(client)
        try:
            with anyio.fail_after(HEAD_TIMEOUT):
                head = await reader.receive_until(b"\r\n\r\n", MAX_HEAD)
        except (TimeoutError, anyio.DelimiterNotFound, anyio.IncompleteRead, anyio.EndOfStream):
            return
        line, _, fields = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ")
        except ValueError:
            await _answer(client, 400, "not an HTTP request")
            return
        if method == "CONNECT":
            await self._tunnel(client, reader, target)
        elif target.startswith("http://"):
            await self._forward(client, reader, method, target, version, fields)
        else:
            await _answer(client, 400, "a proxy takes CONNECT or absolute http:// requests")

    async def _open(self, host: str, port: int) -> SocketStream | None:
        """A connection to an address of `host` the rules allow; None (the refusal kept)
        when they allow none."""
        try:
            addresses = await self.rules.resolve(host, port)
        except Refused as exc:
            self._remember(host, port, str(exc))
            log.debug("browser.refused", host=host, port=port, reason=str(exc))
            return None
        failure: Exception | None = None
        for address in addresses:
            try:
                with anyio.fail_after(CONNECT_TIMEOUT):
                    return await anyio.connect_tcp(address, port)
            except (OSError, TimeoutError) as exc:
                failure = exc
        raise OSError(f"could not connect to {host}:{port} ({failure})")

    async def _tunnel(
        self, client: SocketStream, reader: BufferedByteReceiveStream, target: str
    ) -> None:
        host, _, port_text = target.rpartition(":")
        if not host or not port_text.isdigit():
            await _answer(client, 400, f"CONNECT to {target[:100]!r}: no host:port")
            return
        host, port = host.strip("[]"), int(port_text)
        upstream = await self._upstream(client, host, port)
        if upstream is None:
            return
        async with upstream:
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with _Carrier() as carrier:
                async with anyio.create_task_group() as both:
                    both.start_soon(carrier.pump, reader, upstream)
                    both.start_soon(carrier.pump, upstream, client)

    async def _upstream(self, client: SocketStream, host: str, port: int) -> SocketStream | None:
        """A connection to a checked address of `host`; None once the browser was answered
        why there is none (refused: 403, unreachable: 502)."""
        try:
            upstream = await self._open(host, port)
        except OSError as exc:
            await _answer(client, 502, str(exc))
            return None
        if upstream is None:
            await _answer(client, 403, f"refused: {self.refusal(host, port)}")
        return upstream

    async def _forward(
        self,
        client: SocketStream,
        reader: BufferedByteReceiveStream,
        method: str,
        target: str,
        version: str,
        fields: bytes,
    ) -> None:
        """One plain-http request, sent on a connection of its own and answered with
        `Connection: close`, so the browser never sends a second one down it."""
        try:
            parts = urlsplit(target)
            host, port = parts.hostname, parts.port or 80
        except ValueError:
            host = None
        if not host:
            await _answer(client, 400, f"{target[:100]!r} names no host")
            return
        upstream = await self._upstream(client, host, port)
        if upstream is None:
            return
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        async with upstream:
            request = f"{method} {path} {version}\r\n".encode("latin-1")
            await upstream.send(request + _closing(fields))
            answer = BufferedByteReceiveStream(upstream)
            with _Carrier() as carrier:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(carrier.pump, reader, upstream)  # the request's body, if any
                    try:
                        head = await answer.receive_until(b"\r\n\r\n", MAX_HEAD)
                    except (anyio.DelimiterNotFound, anyio.IncompleteRead, anyio.EndOfStream):
                        await _answer(client, 502, f"{host} sent no valid answer")
                    else:
                        status, _, fields = head.partition(b"\r\n")
                        await client.send(status + b"\r\n" + _closing(fields))
                        await carrier.pump(answer, client)
                    tg.cancel_scope.cancel()


def _closing(fields: bytes) -> bytes:
    """A head's fields (each line ending in CRLF, then the blank line) without the hop-by-hop
    ones, saying `Connection: close`."""
    kept = [
        line
        for line in fields.split(b"\r\n")
        if line and line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP
    ]
    return b"".join(line + b"\r\n" for line in kept) + b"Connection: close\r\n\r\n"


class _Carrier:
    """Bytes carried between two connections, given up (the scope cancelled) once nothing
    has moved either way for IDLE_TIMEOUT."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + IDLE_TIMEOUT)

    def __enter__(self) -> _Carrier:
        self.scope.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool:
        return bool(self.scope.__exit__(*exc))

    async def pump(self, source: ByteReceiveStream, sink: ByteStream) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            while True:
                chunk = await source.receive()
                self.scope.deadline = anyio.current_time() + IDLE_TIMEOUT
                await sink.send(chunk)
        with suppress(Exception):  # the other side may be gone already
            await sink.send_eof()


async def _answer(client: SocketStream, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Unavailable"}
    body = text.encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(head.encode("latin-1") + body)
