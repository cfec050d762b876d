"""Files the fakes serve with another size than they said: the platform's description of the
file gives `declared` (None: no size at all), and the body goes without a length, so the
client learns how large it is only by reading it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import EllipsisType

from aiohttp import web

Declared = int | None | EllipsisType
"""A size a fake states for a file: its true one (`...`, the default), another, or none."""
PIECE = 64 * 1024


def stated(data: bytes, declared: Declared) -> int | None:
    """The size the platform states for `data`."""
    return len(data) if declared is ... else declared


@dataclass
class Served:
    """What went out of the files served without a length."""

    bodies: list[int] = field(default_factory=list)
    """Bytes sent of each, until the client hung up or the file ended."""
    whole: list[bool] = field(default_factory=list)
    """Whether each went out whole."""
    _ended: threading.Condition = field(default_factory=threading.Condition)

    def ended(self, sent: int, size: int) -> None:
        with self._ended:
            self.bodies.append(sent)
            self.whole.append(sent == size)
            self._ended.notify_all()

    def last_whole(self, timeout: float = 20.0) -> bool:
        """Whether the last body went out whole, once its sending has ended."""
        deadline = time.monotonic() + timeout
        with self._ended:
            while not self.whole:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no file was served without a length")
                self._ended.wait(left)
            return self.whole[-1]


def send_unmeasured(
    handler: BaseHTTPRequestHandler, data: bytes, media_type: str, served: Served
) -> None:
    """The body with no Content-Length, the connection closed after it (as HTTP allows)."""
    handler.send_response(200)
    handler.send_header("content-type", media_type)
    handler.send_header("connection", "close")
    handler.end_headers()
    handler.close_connection = True
    sent = 0
    try:
        for start in range(0, len(data), PIECE):
            handler.wfile.write(data[start : start + PIECE])
            sent += len(data[start : start + PIECE])
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass
    served.ended(sent, len(data))


async def stream_unmeasured(
    request: web.Request, data: bytes, media_type: str, served: Served
) -> web.StreamResponse:
    """The body in chunks (HTTP/1.1 chunked encoding), no Content-Length."""
    response = web.StreamResponse(headers={"Content-Type": media_type})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = 0
    try:
        for start in range(0, len(data), PIECE):
            await response.write(data[start : start + PIECE])
            sent += len(data[start : start + PIECE])
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    served.ended(sent, len(data))
    return response
