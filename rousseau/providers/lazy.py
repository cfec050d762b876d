"""A provider that is built in a worker thread while the daemon starts, and awaited by the
first turn that needs it.

Building a provider imports its SDK (a third of a second for openai, more for some): the
daemon starts polling its transports meanwhile instead of waiting for it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing

import anyio

from rousseau.agent import Provider, Request, Response, StreamEvent, streams


class LazyProvider:
    """Stands in for the provider `build` makes; `build()` runs once, in a thread, when
    `prepare()` is called (or at first use)."""

    def __init__(self, name: str, build: Callable[[], Provider]) -> None:
        self.name = name
        self._build = build
        self._provider: Provider | None = None
        self._error: BaseException | None = None
        self._ready: anyio.Event | None = None

    async def prepare(self) -> None:
        """Build the provider (once; later callers wait for the first)."""
        if self._ready is not None:
            await self._ready.wait()
            return
        self._ready = anyio.Event()
        try:
            self._provider = await anyio.to_thread.run_sync(self._build)
        except Exception as exc:  # given to every caller, as building it at once would
            self._error = exc
        finally:
            self._ready.set()

    async def get(self) -> Provider:
        await self.prepare()
        if self._error is not None:
            raise self._error
        assert self._provider is not None
        return self._provider

    @property
    def model(self) -> str:
        return str(getattr(self._provider, "model", ""))

    async def complete(self, request: Request) -> Response:
        return await (await self.get()).complete(request)

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        provider = await self.get()
        if streams(provider):
            async with aclosing(provider.stream(request)) as events:
                async for event in events:
                    yield event
            return
        response = await provider.complete(request)
        if response.message.text:
            yield StreamEvent.text_delta(response.message.text)
        yield StreamEvent.final(response)

    async def check(self) -> None:
        probe = getattr(await self.get(), "check", None)
        if probe is not None:
            await probe()

    async def aclose(self) -> None:
        closer = getattr(self._provider, "aclose", None)
        if closer is not None:
            await closer()
