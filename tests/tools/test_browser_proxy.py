"""The browser's checking proxy over raw sockets, as Chromium speaks to it: CONNECT for
https, absolute-URI requests for http, the address rules applied after resolution, and its
bounds."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from rousseau.tools.web import proxy
from rousseau.tools.web.guard import AddressRules
from rousseau.tools.web.proxy import CheckingProxy

pytestmark = pytest.mark.anyio


class Origin:
    """A web server on 127.0.0.1 that says which path it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        asked = self.asked

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keeps connections open unless told otherwise

            def do_GET(self) -> None:
                asked.append(self.path)
                body = f"you asked for {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port


@pytest.fixture
def origin() -> Iterator[Origin]:
    server = Origin()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()
    thread.join()


async def started(rules: AddressRules) -> AsyncIterator[CheckingProxy]:
    checking = CheckingProxy(rules)
    await checking.start()
    try:
        yield checking
    finally:
        await checking.aclose()


@pytest.fixture
async def strict() -> AsyncIterator[CheckingProxy]:
    async for checking in started(AddressRules()):
        yield checking


@pytest.fixture
async def lenient() -> AsyncIterator[CheckingProxy]:
    async for checking in started(AddressRules.of(False, ["127.0.0.1"])):
        yield checking


async def ask(checking: CheckingProxy, request: bytes) -> bytes:
    """Everything the proxy answers `request` until it closes the connection."""
    stream = await anyio.connect_tcp("127.0.0.1", checking.port)
    async with stream:
        await stream.send(request)
        return await read_all(stream)


async def read_all(stream: SocketStream) -> bytes:
    got = b""
    with anyio.fail_after(20):
        while True:
            try:
                got += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return got


async def test_a_connect_to_a_refused_address_is_answered_403_with_the_reason(
    strict: CheckingProxy, origin: Origin
) -> None:
    answer = await ask(strict, f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"refused: 127.0.0.1, a loopback address" in answer
    assert "loopback" in (strict.refusal("127.0.0.1", origin.port) or "")
    assert strict.refusal("127.0.0.1", origin.port + 1) is None  # by host and port


async def test_a_refused_plain_request_never_reaches_the_origin(
    strict: CheckingProxy, origin: Origin
) -> None:
    url = f"http://localhost:{origin.port}/secret"
    answer = await ask(strict, f"GET {url} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 ") and b"localhost resolves to" in answer
    assert origin.asked == []


async def test_an_allowed_plain_request_is_sent_once_and_the_connection_closed(
    lenient: CheckingProxy, origin: Origin
) -> None:
    url = f"http://127.0.0.1:{origin.port}/page?q=1"
    head = f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Connection: keep-alive\r\n\r\n"
    answer = await ask(lenient, head.encode())  # returns: the proxy closed the connection
    assert answer.startswith(b"HTTP/1.0 200 ") or answer.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nConnection: close\r\n" in answer and answer.endswith(b"you asked for /page?q=1")
    assert origin.asked == ["/page?q=1"]  # in origin form, as a server expects it


async def test_a_connect_to_an_allowed_address_is_a_tunnel(
    lenient: CheckingProxy, origin: Origin
) -> None:
    stream = await anyio.connect_tcp("127.0.0.1", lenient.port)
    async with stream:
        await stream.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n\r\n".encode())
        reader = BufferedByteReceiveStream(stream)
        with anyio.fail_after(20):
            established = await reader.receive_until(b"\r\n\r\n", 1000)
        assert established == b"HTTP/1.1 200 Connection established"
        await stream.send(b"GET /through HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await read_all(stream)).endswith(b"you asked for /through")


async def test_what_is_not_a_proxy_request_is_answered_400(lenient: CheckingProxy) -> None:
    answer = await ask(lenient, b"GET /form HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert (await ask(lenient, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400 ")


async def test_past_its_connections_a_newcomer_is_answered_503(
    lenient: CheckingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy, "MAX_CONNECTIONS", 1)
    holder = await anyio.connect_tcp("127.0.0.1", lenient.port)
    async with holder:
        await holder.send(b"GET http://127.0.0.1/ HTTP/1.1\r\n")  # a head not finished yet
        with anyio.fail_after(20):
            while lenient.active < 1:
                await anyio.sleep(0.01)
        answer = await ask(lenient, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 503 ")


async def test_a_head_never_finished_is_given_up(
    lenient: CheckingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy, "HEAD_TIMEOUT", 0.2)
    stream = await anyio.connect_tcp("127.0.0.1", lenient.port)
    async with stream:
        await stream.send(b"GET http://127.0.0.1/ HTTP/1.1\r\n")
        assert await read_all(stream) == b""  # closed, unanswered
    assert lenient.active == 0
