"""GET over httpcore (HTTP/1.1 and HTTP/2, connections kept and reused) with the address
rules at every connection, redirects followed by hand (each hop checked again), and bodies
decompressed here, a bounded slice at a time, so a gzip or brotli bomb stops at the cap.
"""

from __future__ import annotations

import ssl
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import anyio

from rousseau.tools.web.guard import AddressRules, Refused

if TYPE_CHECKING:
    import httpcore

MAX_REDIRECTS = 5
USER_AGENT = "Mozilla/5.0 (compatible; rousseau; +https://github.com/rousseau-agent)"
ACCEPT = "text/html,application/xhtml+xml,application/pdf,application/json,text/*;q=0.9,*/*;q=0.5"
_SLICE = 16 * 1024  # compressed bytes fed to a decompressor at once
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchError(Exception):
    """The page could not be fetched; the message says why, for the model to read."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    """Where the body came from, after redirects."""
    status: int
    media_type: str
    charset: str | None
    body: bytes
    cut: bool
    """The body went past the cap and was cut there."""


class _Guarded:
    """httpcore's network backend with the address rules at every connection: the host is
    resolved here, and the connection made to an address that passed, never resolved again."""

    def __init__(self, rules: AddressRules) -> None:
        import httpcore

        self.rules = rules
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        import httpcore

        failure: Exception | None = None
        for address in await self.rules.resolve(host, port):
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Refused("unix sockets are not fetched")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class Fetcher:
    """One pool of connections for an agent's web_fetch calls."""

    def __init__(self, rules: AddressRules, *, max_bytes: int, timeout: float) -> None:
        self.rules = rules
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._pool: httpcore.AsyncConnectionPool | None = None

    def _connections(self) -> httpcore.AsyncConnectionPool:
        if self._pool is None:
            import httpcore

            backend: Any = _Guarded(self.rules)
            self._pool = httpcore.AsyncConnectionPool(
                ssl_context=ssl.create_default_context(),
                http2=True,
                max_connections=16,
                keepalive_expiry=30.0,
                network_backend=backend,
            )
        return self._pool

    async def get(self, url: str) -> Fetched:
        """The body at `url`, after at most MAX_REDIRECTS redirects, within `timeout`."""
        import httpcore

        try:
            with anyio.fail_after(self.timeout):
                for _ in range(MAX_REDIRECTS + 1):
                    self.rules.check_url(url)
                    fetched, location = await self._one(url)
                    if location is None:
                        return fetched
                    url = urljoin(url, location)
        except TimeoutError:
            raise FetchError(f"no complete answer within {self.timeout:.0f} s") from None
        except httpcore.TimeoutException:
            raise FetchError(f"{url}: the server stopped answering") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
            raise FetchError(f"{url}: {_said(exc)}") from None
        raise FetchError(f"more than {MAX_REDIRECTS} redirects; the last pointed to {url}")

    async def _one(self, url: str) -> tuple[Fetched, str | None]:
        headers = [
            (b"User-Agent", USER_AGENT.encode()),
            (b"Accept", ACCEPT.encode()),
            (b"Accept-Encoding", b"gzip, deflate, br"),
        ]
        timeouts = {"connect": self.timeout, "read": self.timeout, "pool": self.timeout}
        async with self._connections().stream(
            "GET", url, headers=headers, extensions={"timeout": timeouts}
        ) as response:
            found = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
            location = found.get("location")
            if response.status in _REDIRECTS and location:
                return Fetched(url, response.status, "", None, b"", False), location
            media_type, charset = _content_type(found.get("content-type", ""))
            body, cut = await self._body(response, found.get("content-encoding", ""))
        return Fetched(url, response.status, media_type, charset, body, cut), None

    async def _body(self, response: httpcore.Response, encoding: str) -> tuple[bytes, bool]:
        """The decoded body, at most max_bytes of it (and whether more was left)."""
        decoder = _decoder(encoding.strip().lower())
        out = bytearray()
        async for raw in response.aiter_stream():
            for start in range(0, len(raw), _SLICE):
                room = self.max_bytes - len(out)
                out += decoder.feed(raw[start : start + _SLICE], room + 1)
                if len(out) > self.max_bytes:
                    return bytes(out[: self.max_bytes]), True
        out += decoder.feed(b"", self.max_bytes - len(out) + 1)
        if len(out) > self.max_bytes:
            return bytes(out[: self.max_bytes]), True
        return bytes(out), False

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None


class _Identity:
    def feed(self, data: bytes, limit: int) -> bytes:
        return data


class _Zlib:
    """gzip or deflate, never producing more than `limit` bytes per call (zlib's
    max_length): what it held back is produced by the next calls."""

    def __init__(self, wbits: int) -> None:
        self._z = zlib.decompressobj(wbits)

    def feed(self, data: bytes, limit: int) -> bytes:
        out = bytearray(self._z.decompress(self._z.unconsumed_tail + data, limit))
        while self._z.unconsumed_tail and len(out) < limit:
            out += self._z.decompress(self._z.unconsumed_tail, limit - len(out))
        return bytes(out)


class _Brotli:
    def __init__(self) -> None:
        import brotli

        self._b = brotli.Decompressor()
        self._held = b""

    def feed(self, data: bytes, limit: int) -> bytes:
        out = bytearray()
        data = self._held + data
        self._held = b""
        if not self._b.can_accept_more_data():
            out += self._b.process(b"", output_buffer_limit=limit)
            if not self._b.can_accept_more_data():
                self._held = data
                return bytes(out)
        out += self._b.process(data, output_buffer_limit=max(1, limit - len(out)))
        return bytes(out)


def _decoder(encoding: str) -> _Identity | _Zlib | _Brotli:
    if encoding in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return _Zlib(zlib.MAX_WBITS)
    if encoding == "br":
        return _Brotli()
    return _Identity()


def _content_type(value: str) -> tuple[str, str | None]:
    media_type, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.strip().partition("=")
        if key.lower() == "charset" and val:
            charset = val.strip("\"' ").lower()
    return media_type.strip().lower(), charset


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
