"""A base for fakes built on aiohttp.web: the server runs its own event loop in a thread, so
tests drive it with plain calls whatever loop they run themselves."""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from aiohttp import web

T = TypeVar("T")


class AioServer:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.port = 0
        self.sockets: list[web.WebSocketResponse] = []
        self._transports: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self: Any) -> Any:
        self._thread.start()
        self._ready.wait(10)
        return self

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def drop(self) -> None:
        """Close every websocket without a word, as a dying network does."""

        async def close() -> None:
            for ws in list(self.sockets):
                await ws.close()

        self.run(close())

    def stop(self) -> None:
        async def shutdown() -> None:
            for ws in list(self.sockets):
                await ws.close()
            if self._runner is not None:
                await self._runner.cleanup()
            for transport in self._transports:  # TLS ones may still wait for a goodbye
                transport.abort()
            await anyio.lowlevel.checkpoint()

        self.run(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @web.middleware
    async def _track(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.transport is not None:
            self._transports.add(request.transport)
        response: web.StreamResponse = await handler(request)
        return response

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(middlewares=[self._track])
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        self._loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._ready.set()
        self._loop.run_forever()


def post_signed(url: str, body: Any, token: str) -> int:
    """`body` posted as JSON with a bearer `token` (none if empty), as a platform posts to an
    app's endpoint; the status it answered (0: nothing listens there yet)."""
    import json
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        refused.close()
        return int(refused.code)
    except urllib.error.URLError:
        return 0
