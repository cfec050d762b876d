"""The web face under attack, over real sockets against the daemon's own servers (run in
this process, so a test may shorten a deadline): bodies past their route's limit refused
before they are read, trickling clients closed while others are answered on both ports,
connections capped per address, forwarded headers believed from trusted proxies alone, and
failed logins limited per account as well as per address."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.web import HEALTH_PER_ADDRESS, PER_ADDRESS, server
from tests.helpers import free_port, unavailable

pytestmark = pytest.mark.anyio

PASSWORD = "correct horse battery staple"
KEY = "rsk-limits-0123456789abcdefghijklmnop"
PROXY = "127.0.0.9"
"""The one trusted proxy; 127.0.0.1 (like any other local process) is not one."""
API_LIMIT = 100_000
UPLOAD_LIMIT = 1000
"""media.max_bytes: a web chat message takes this much in files, plus its text."""


@dataclass(kw_only=True, slots=True)
class Ports:
    web: int
    health: int


@asynccontextmanager
async def web_face(tmp_path: Path) -> AsyncIterator[Ports]:
    """A daemon (in this process) with the web face and a health port, once both answer."""
    try:
        from argon2 import PasswordHasher
    except ImportError:
        unavailable("the web extra is not installed (pip install 'rousseau[web]')")
    import httpx

    ports = Ports(web=free_port(), health=free_port())
    hasher = PasswordHasher()
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp_path / "state.db")},
                "agent": {"workspace": str(tmp_path / "ws")},
                "media": {"max_bytes": UPLOAD_LIMIT},
                "health": {"listen": f"127.0.0.1:{ports.health}"},
                "web": {
                    "listen": f"127.0.0.1:{ports.web}",
                    "password_hash": hasher.hash(PASSWORD),
                    "chat_users": {"carol": hasher.hash("carol's own password")},
                    "api_keys": [{"key": KEY, "owner": "alice"}],
                    "api_max_bytes": API_LIMIT,
                    "trusted_proxies": [PROXY],
                },
            }
        )
    )
    config = load_config(str(path), {"HOME": str(tmp_path)})

    async def echo(request: Request) -> Response:
        return text_reply("echo")

    daemon = Daemon(config, provider=FunctionProvider(echo))  # the web chat and the API
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        async with httpx.AsyncClient() as client:
            with anyio.fail_after(20):
                for port in (ports.web, ports.health):
                    while True:  # polled: the daemon says nothing when its servers are up
                        try:
                            answer = await client.get(f"http://127.0.0.1:{port}/healthz")
                            if answer.status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        await anyio.sleep(0.02)
        yield ports
        daemon.stop()


async def connect(port: int, local: str = "127.0.0.1") -> SocketStream:
    return await anyio.connect_tcp("127.0.0.1", port, local_host=local)


async def answer_of(stream: SocketStream) -> bytes:
    """What the server sends until it closes the connection (10 s at most)."""
    got = b""
    with anyio.fail_after(10):
        try:
            while True:
                got += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return got


async def closed_by_server(stream: SocketStream, within: float = 10) -> bool:
    """Whether the server closes `stream` (sending nothing) within `within` seconds."""
    with anyio.move_on_after(within):
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True
    return False


async def get(port: int, path: str = "/healthz", local: str = "127.0.0.1") -> int:
    """A plain GET on a connection of its own: its status, or 0 when the connection was
    closed with no answer."""
    async with await connect(port, local) as stream:
        try:
            await stream.send(
                f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
        except anyio.BrokenResourceError:  # turned away before it could ask
            return 0
        answer = await answer_of(stream)
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def status_of(answer: bytes) -> int:
    return int(answer.split()[1])


# -- bodies -------------------------------------------------------------------------------


async def test_a_body_declared_over_the_limit_is_refused_at_once_unread(tmp_path: Path) -> None:
    async with web_face(tmp_path) as ports:
        async with await connect(ports.web) as stream:
            await stream.send(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {KEY}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 200000000\r\n\r\n"
            )
            answer = await answer_of(stream)  # no byte of the body sent: it is not awaited
        assert status_of(answer) == 413
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower()
        assert json.loads(body)["error"]["code"] == "request_too_large"

        # Each route has its own limit: a web chat message takes its files (media.max_bytes)
        # and its text, a login form little.
        for path, length, status in (
            ("/login", 100_000, 413),
            ("/chat/send", 100_000, 401),  # within its limit: on to the login check
            ("/chat/send", 2_000_000, 413),
            ("/healthz", 100_000, 413),
        ):
            async with await connect(ports.web) as stream:
                await stream.send(
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n".encode()
                    + b"Content-Type: application/x-www-form-urlencoded\r\n"
                    + b"Connection: close\r\n\r\n"
                )
                if status != 413:
                    await stream.send(b"a" * length)
                assert status_of(await answer_of(stream)) == status, path
        async with await connect(ports.health) as stream:
            await stream.send(
                b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
            )
            assert status_of(await answer_of(stream)) == 413


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(tmp_path: Path) -> None:
    chunk = b"x" * 16_384
    async with web_face(tmp_path) as ports:
        async with await connect(ports.web) as stream:
            await stream.send(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {KEY}\r\n".encode()
                + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            sent = 0
            while sent <= API_LIMIT:
                await stream.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            # The body's end is never sent: only a server that stops at the limit answers.
            answer = await answer_of(stream)
        assert status_of(answer) == 413
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == (
            "request_too_large"
        )


# -- slow and many connections --------------------------------------------------------------


async def trickle(stream: SocketStream, every: float) -> None:
    """A request head one header line at a time, never ending (a slowloris)."""
    try:
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        while True:
            await anyio.sleep(every)  # the attack's own pace, not a wait for the server
            await stream.send(b"X-Trickle: 1\r\n")
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


async def test_a_trickling_client_is_closed_and_others_are_answered_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "HEAD_TIMEOUT", 1.0)
    async with web_face(tmp_path) as ports, AsyncExitStack() as streams:
        tg = await streams.enter_async_context(anyio.create_task_group())
        trickling = {}
        for port in (ports.web, ports.health):
            trickling[port] = await streams.enter_async_context(
                await connect(port, local="127.0.0.20")
            )
            tg.start_soon(trickle, trickling[port], 0.1)
        for port in (ports.web, ports.health):
            assert await get(port) == 200
        for port in (ports.web, ports.health):
            assert await closed_by_server(trickling[port]), port
        # A kept-alive connection trickling its next request head is closed as well.
        async with await connect(ports.web) as stream:
            await stream.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            with anyio.fail_after(10):
                assert (await stream.receive()).startswith(b"HTTP/1.1 200")
            tg.start_soon(trickle, stream, 0.1)
            assert await closed_by_server(stream)
        tg.cancel_scope.cancel()


async def test_a_slowloris_of_120_connections_on_each_port_leaves_healthz_answering(
    tmp_path: Path,
) -> None:
    """All from the address the health checks come from, too: a connection still waiting
    for its head gives its place to a newcomer, so a request that comes whole gets in."""
    async with web_face(tmp_path) as ports, AsyncExitStack() as flood:
        async with anyio.create_task_group() as tg:
            for port in (ports.web, ports.health):
                for _ in range(120):
                    try:
                        stream = await flood.enter_async_context(await connect(port))
                    except OSError:  # the backlog is full for a moment
                        continue
                    tg.start_soon(trickle, stream, 0.5)
            for port in (ports.web, ports.health):
                statuses = [await get(port) for _ in range(5)]
                assert statuses == [200] * 5, port
            tg.cancel_scope.cancel()


async def test_connections_from_one_address_are_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "HEAD_TIMEOUT", 60.0)  # only the cap closes anything here
    async with web_face(tmp_path) as ports, AsyncExitStack() as streams:
        # Every place of 127.0.0.2 in a request (a login form whose body never comes).
        for _ in range(PER_ADDRESS):
            stream = await streams.enter_async_context(await connect(ports.web, "127.0.0.2"))
            await stream.send(
                b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
            )
            with anyio.fail_after(10):  # the route reads its body: the head is in
                assert (await stream.receive()).startswith(b"HTTP/1.1 100 ")
        assert await get(ports.web, local="127.0.0.2") == 0  # turned away, unanswered
        assert await get(ports.web, local="127.0.0.3") == 200  # others still get in

        # Ones still sending their heads: the oldest makes room for a newcomer, served.
        waiting = []
        for _ in range(HEALTH_PER_ADDRESS):
            stream = await streams.enter_async_context(await connect(ports.health, "127.0.0.4"))
            await stream.send(b"GET /healthz HTTP/1.1\r\n")
            waiting.append(stream)
        assert await get(ports.health, local="127.0.0.4") == 200
        assert await closed_by_server(waiting[0])


# -- proxies and logins ---------------------------------------------------------------------


class Browser:
    """A login form's client from `local` (as a proxy when it sends `forwarded`)."""

    def __init__(self, port: int, local: str) -> None:
        import httpx

        transport = httpx.AsyncHTTPTransport(local_address=local)
        self.client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", transport=transport)

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def form(self, headers: dict[str, str] | None = None) -> tuple[str, str]:
        """The login form's CSRF token and the Set-Cookie that carries it."""
        page = await self.client.get("/login", headers=headers)
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        return token.group(1), page.headers["set-cookie"]

    async def log_in(self, user: str, password: str, forwarded_for: str | None = None) -> int:
        token, _ = await self.form()
        answer = await self.client.post(
            "/login",
            data={"csrf": token, "user": user, "password": password},
            headers={"X-Forwarded-For": forwarded_for} if forwarded_for else None,
        )
        return answer.status_code


async def test_forwarded_headers_are_believed_from_a_trusted_proxy_alone(tmp_path: Path) -> None:
    https = {"X-Forwarded-Proto": "https", "Forwarded": "for=10.9.9.9;proto=https"}
    async with web_face(tmp_path) as ports:
        async with Browser(ports.web, "127.0.0.1") as local:
            _, cookie = await local.form(https)
            assert "secure" not in cookie.lower()
            # Another address in every try: not believed, so the address's four count.
            tries = [await local.log_in("mallory", f"guess{i}", f"10.0.0.{i}") for i in range(6)]
            assert tries == [401] * 4 + [429] * 2
        async with Browser(ports.web, PROXY) as proxy:
            _, cookie = await proxy.form(https)
            assert "secure" in cookie.lower()
            tries = [await proxy.log_in("trudy", f"guess{i}", "10.0.0.1") for i in range(5)]
            assert tries == [401] * 4 + [429]
            assert await proxy.log_in("trudy", "guess", "10.0.0.2") == 401  # someone else


async def test_failed_logins_are_limited_per_account(tmp_path: Path) -> None:
    """Wrong passwords for the owner, each from an address of its own (as a trusted proxy
    forwards them): refused after six. The lock is the owner's name alone."""
    async with web_face(tmp_path) as ports, Browser(ports.web, PROXY) as proxy:
        tries = [await proxy.log_in("owner", f"guess{i}", f"10.0.1.{i}") for i in range(10)]
        assert tries == [401] * 6 + [429] * 4
        assert await proxy.log_in("owner", PASSWORD, "10.0.2.1") == 429  # not checked
        assert await proxy.log_in("carol", "carol's own password", "10.0.2.2") == 303
