"""The routes taking what a platform posts to the daemon (Telegram's webhook, Google Chat's
events): on the web
face's server, or on a server of their own address that serves them alone. Either way one
kind of server and one set of limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from rousseau.transports.abilities import Posts

MAX_BYTES = 1024 * 1024
"""The largest post taken (an update is a few kilobytes); larger ones are answered 413 by
the server's body limit (web/limits.py), before this route reads them."""


def routes(posts: Iterable[Posts]) -> list[Route]:
    """A POST route for each transport taking posts."""
    return [Route(each.path, _endpoint(each), methods=["POST"]) for each in posts]


def _endpoint(posts: Posts) -> Callable[[Request], Awaitable[Response]]:
    async def take(request: Request) -> Response:
        body = await request.body()  # at most MAX_BYTES: the server's body limit sees to it
        status, text = await posts.take(request.headers, body)
        if text.startswith("{"):  # an answer the platform reads as JSON (Google Chat's)
            return Response(text, status_code=status, media_type="application/json")
        return PlainTextResponse(text, status_code=status)

    return take
