"""The web face as one Starlette app: /healthz and /metrics (open, as before), the owner's
dashboard, the web chat, and the OpenAI-compatible API under /v1.

Every page and action but login needs a login (pages redirect to /login, the rest answer
401); every form and script call carries the login's CSRF token; /v1 needs a bearer key.
Pages are rendered on the server (Jinja2, autoescaped); the one script, served from
/static, only streams updates in, so the CSP allows no inline script at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rousseau.transports.abilities import Posts
from rousseau.web import limits, posts
from rousseau.web.face import Face

if TYPE_CHECKING:
    from rousseau.config import WebConfig

log = structlog.get_logger("rousseau.web")

HERE = Path(__file__).parent
API = "/v1/"
"""Where the OpenAI-compatible API is served (its errors are shaped as OpenAI's)."""
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


async def healthz(request: Request) -> Response:
    state = request.app.state.face.health()
    healthy = all(s["connected"] for s in state.values())
    return JSONResponse({"ok": healthy, "transports": state}, status_code=200 if healthy else 503)


async def favicon(request: Request) -> Response:
    """The icon browsers ask for at /favicon.ico whatever the page says (SVG, which they
    take from any address)."""
    icon = (HERE / "static" / "favicon.svg").read_bytes()
    return Response(icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


async def metrics(request: Request) -> Response:
    body = request.app.state.face.metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4")


def build(face: Face) -> Starlette:
    """The app: health alone, or (with `face.config`) the whole web face; either with the
    routes of the posts taken at its address."""
    routes: list[Any] = [
        *posts.routes(face.posts),
        Route("/healthz", healthz),
        Route("/metrics", metrics),
    ]
    if face.config is not None:
        from rousseau.web import api, dashboard, login, memory

        routes += login.routes() + dashboard.routes() + memory.routes() + api.routes()
        routes.append(Route("/favicon.ico", favicon))
        face.conversations = face.conversations or api.Conversations()
        routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    app = Starlette(routes=routes)
    app.state.face = face
    if face.config is not None:
        from rousseau.web.dashboard import templates

        app.state.templates = templates()
    limit = body_limits(face.posts, face.config, face.upload_bytes)
    app.add_middleware(limits.BodyLimit, limit=limit, refuse=_too_large)
    app.add_middleware(SecurityHeaders)
    app.exception_handlers[404] = _not_found
    return app


def posts_app(taken: list[Posts]) -> Starlette:
    """The app of a server taking posts alone (an address of their own)."""
    app = Starlette(routes=posts.routes(taken))
    app.add_middleware(limits.BodyLimit, limit=body_limits(taken), refuse=_too_large)
    app.add_middleware(SecurityHeaders)
    app.exception_handlers[404] = _not_found
    return app


def body_limits(
    taken: list[Posts], config: WebConfig | None = None, upload_bytes: int = 0
) -> Callable[[str], int]:
    """The largest body each route takes: a platform's post posts.MAX_BYTES, the API
    `web.api_max_bytes`, a web chat message its files (`upload_bytes`, media.max_bytes)
    and its text, anything else limits.SMALL."""
    exact = {each.path: posts.MAX_BYTES for each in taken}
    api = config.api_max_bytes if config is not None else limits.SMALL
    if config is not None:
        exact["/chat/send"] = upload_bytes + limits.UPLOAD_FRAMING

    def limit(path: str) -> int:
        found = exact.get(path)
        if found is not None:
            return found
        return api if path.startswith(API) else limits.SMALL

    return limit


def _too_large(path: str, limit: int) -> Response:
    message = f"the request body is over {limit} bytes"
    if path.startswith(API):
        response: Response = json_error(413, message, "request_too_large")
    else:
        response = PlainTextResponse(message + "\n", status_code=413)
    response.headers["connection"] = "close"  # the rest of the body is never read
    return response


async def _not_found(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("not found\n", status_code=404)


class SecurityHeaders:
    """Adds the security headers (CSP without inline script, no framing, no sniffing) to
    every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def json_error(status: int, message: str, kind: str) -> JSONResponse:
    """An error as OpenAI's API shapes it, which its SDKs read."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": kind}},
        status_code=status,
        headers={"www-authenticate": "Bearer"} if status == 401 else None,
    )


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
