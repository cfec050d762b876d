"""A small web site on 127.0.0.1 for the web tools: an article with boilerplate around it,
redirect chains, a PDF, JSON, a 50 MB body, gzip and brotli bombs, a server that stalls."""

from __future__ import annotations

import functools
import json
import zlib
from typing import Any

import anyio
from aiohttp import web

from tests.fakes.aio import AioServer

ARTICLE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Opening hours of the library</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/login">Log in</a></nav>
<div class="cookie-banner">We use cookies. <button>Accept all</button></div>
<main><article>
<h1>Opening hours of the library</h1>
<p>The town library opens its doors to everyone. This page lists when it is open, how to
reach it and what to bring. Read the <a href="/rules">house rules</a> before a first visit,
and ask at the desk for a reader's card: it is free for residents of the town.</p>
<h2>When it is open</h2>
<table>
<tr><th>Day</th><th>Hours</th></tr>
<tr><td>Monday</td><td>10:00-18:00</td></tr>
<tr><td>Saturday</td><td>09:00-13:00</td></tr>
</table>
<h2>What to bring</h2>
<ul><li>a reader's card</li><li>the books to return</li></ul>
<p>The library is closed on public holidays. Groups of more than ten people are asked to
announce their visit a week ahead, so that a librarian can show them around the reading
rooms, the archive and the children's corner on the first floor.</p>
</article></main>
<footer>Copyright 2026 Town Council. All rights reserved. Imprint. Privacy policy.</footer>
</body></html>
"""

PDF_TEXT = "Train times from Lyon"


def pdf(text: str) -> bytes:
    """A one-page PDF showing `text` in Helvetica (its cross-reference table computed)."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@functools.cache
def bomb(kind: str, megabytes: int) -> bytes:
    """`megabytes` MiB of zeros, compressed a MiB at a time: a few hundred kilobytes that
    expand past any cap."""
    zeros = bytes(1024 * 1024)
    if kind == "gzip":
        z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return b"".join(z.compress(zeros) for _ in range(megabytes)) + z.flush()
    import brotli

    b = brotli.Compressor(quality=5)
    return b"".join(b.process(zeros) for _ in range(megabytes)) + b.finish()


class FakeSite(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.hits: list[str] = []
        self.stall = 30.0
        """How long /slow waits before its first byte."""

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/{path:.*}", self._page)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.hits.append(path)
        pages: dict[str, Any] = {
            "/article": lambda: web.Response(text=ARTICLE, content_type="text/html"),
            "/doc.pdf": lambda: web.Response(body=pdf(PDF_TEXT), content_type="application/pdf"),
            "/data.json": lambda: web.json_response({"trains": [{"to": "Paris", "at": "09:12"}]}),
            "/plain": lambda: web.Response(text="just words", content_type="text/plain"),
            "/picture.png": lambda: web.Response(body=b"\x89PNG....", content_type="image/png"),
            "/missing": lambda: web.Response(status=404, text="gone"),
        }
        if path in pages:
            response: web.StreamResponse = pages[path]()
            return response
        if path.startswith("/hop/"):
            left = int(path.rsplit("/", 1)[1])
            target = "/article" if left <= 1 else f"/hop/{left - 1}"  # left redirects
            raise web.HTTPFound(target)
        if path == "/away":  # somewhere the rules may refuse
            raise web.HTTPFound(request.query["to"])
        if path == "/big":
            return await self._stream(request, b"x" * 65536, 50 * 1024 * 1024, "text/plain")
        if path in ("/gzip-bomb", "/br-bomb"):
            kind = "gzip" if path == "/gzip-bomb" else "br"
            body = bomb(kind, 256)
            headers = {"Content-Encoding": kind, "Content-Type": "text/plain"}
            return web.Response(body=body, headers=headers)
        if path == "/slow":
            await anyio.sleep(self.stall)
            return web.Response(text="late")
        return web.Response(status=404, text=json.dumps({"no": path}))

    async def _stream(
        self, request: web.Request, chunk: bytes, total: int, media_type: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": media_type})
        response.content_length = total
        await response.prepare(request)
        sent = 0
        try:
            while sent < total:
                await response.write(chunk)
                sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the reader stopped at its cap
        return response
