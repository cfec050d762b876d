"""Fallback: when a provider fails after its own retries, the request goes to the next one."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

import structlog

from rousseau.agent import (
    Provider,
    ProviderError,
    Request,
    Response,
    StreamEvent,
    streams,
)

log = structlog.get_logger("rousseau.providers")


class FallbackProvider:
    """Tries each provider in order; the reply says nothing of the switch, the log does."""

    def __init__(self, providers: Sequence[Provider]) -> None:
        if not providers:
            raise ValueError("FallbackProvider needs at least one provider")
        self.providers = list(providers)
        self.name = self.providers[0].name

    @property
    def model(self) -> str:
        return str(getattr(self.providers[0], "model", ""))

    async def complete(self, request: Request) -> Response:
        for provider, last in self._order():
            try:
                return await provider.complete(request)
            except ProviderError as exc:
                if last:
                    raise
                self._switch(provider, exc)
        raise AssertionError("unreachable")

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        for provider, last in self._order():
            try:
                if streams(provider):
                    async with aclosing(provider.stream(request)) as stream:
                        async for event in stream:
                            yield event
                else:
                    yield StreamEvent.final(await provider.complete(request))
                return
            except ProviderError as exc:
                if last:
                    raise
                self._switch(provider, exc)

    async def check(self) -> None:
        check = getattr(self.providers[0], "check", None)
        if check is not None:
            await check()

    async def aclose(self) -> None:
        for provider in self.providers:
            aclose = getattr(provider, "aclose", None)
            if aclose is not None:
                await aclose()

    def _order(self) -> list[tuple[Provider, bool]]:
        return [(p, i == len(self.providers) - 1) for i, p in enumerate(self.providers)]

    def _switch(self, provider: Provider, exc: ProviderError) -> None:
        following = self.providers[self.providers.index(provider) + 1]
        log.warning(
            "provider.fallback",
            failed=provider.name,
            status=exc.status,
            error=str(exc),
            next=following.name,
        )
