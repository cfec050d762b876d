"""How much a request may send: every route has a body limit, enforced before the route
reads anything. A body declared larger (Content-Length) is refused with 413 at once, unread;
a chunked one is counted as it streams in and refused the moment it passes the limit. Either
way the connection is closed after the 413, so the rest is never read, let alone kept."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SMALL = 64 * 1024
"""The body of a route with no limit of its own (a login, a dashboard form)."""
UPLOAD_FRAMING = 256 * 1024
"""What a web chat message carries besides its files: its text and the form's framing."""


class TooLarge(Exception):
    """A body went past its route's limit while the route read it."""


class BodyLimit:
    """Refuses a request body over `limit(path)` bytes, declared or streamed, with the
    response `refuse(path, limit)` makes (a 413 that closes the connection)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: Callable[[str], int],
        refuse: Callable[[str, int], Response],
    ) -> None:
        self.app = app
        self.limit = limit
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        limit = self.limit(path)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self.refuse(path, limit)(scope, receive, send)
            return
        taken = 0
        started = False

        async def counted() -> Message:
            nonlocal taken
            message = await receive()
            if message["type"] == "http.request":
                taken += len(message.get("body", b""))
                if taken > limit:
                    raise TooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except TooLarge:
            if started:  # the route answered before it read its body: nothing to say
                raise
            await self.refuse(path, limit)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared length (h11 has already refused a malformed one with 400)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
