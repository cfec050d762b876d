"""Logging in to the web face: the password form (double-submit CSRF, failed tries limited),
one-time links sent in chat, and logging out."""

from __future__ import annotations

import secrets

import structlog
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rousseau.web import clients
from rousseau.web.auth import COOKIE, OWNER, Login, same
from rousseau.web.dashboard import guarded, render
from rousseau.web.face import Face

log = structlog.get_logger("rousseau.web")


def _client(request: Request) -> str:
    """Who the limits count a try against: the peer's address, or the one a trusted proxy
    names (web.trusted_proxies)."""
    return clients.key(request.client.host) if request.client else "?"


def _login_form(request: Request, error: str = "", status: int = 200) -> Response:
    token = request.cookies.get("rousseau_login") or secrets.token_urlsafe(24)
    response = render(request, None, "login.html", error=error, form_token=token)
    response.status_code = status
    response.set_cookie(
        "rousseau_login", token, httponly=True, samesite="strict", secure=_secure(request)
    )
    return response


async def login_page(request: Request) -> Response:
    return _login_form(request)


async def login(request: Request) -> Response:
    """The password form: double-submit CSRF (the form's token matches its cookie), four
    failed tries a minute per client address, six per account name (auth.ACCOUNT_TRIES)."""
    face: Face = request.app.state.face
    assert face.logins is not None
    form = await request.form()
    sent, cookie = str(form.get("csrf", "")), request.cookies.get("rousseau_login", "")
    if not cookie or not same(sent, cookie):
        return PlainTextResponse("missing or wrong CSRF token\n", status_code=403)
    user = str(form.get("user", OWNER)).strip() or OWNER
    if not face.logins.may_try(_client(request), user):
        return _login_form(request, "Too many tries: wait a minute.", status=429)
    found = await face.logins.check_password(user, str(form.get("password", "")))
    if found is None:
        return _login_form(request, "Wrong name or password.", status=401)
    face.logins.succeeded(_client(request), user)
    return _logged_in(request, *found)


def _logged_in(request: Request, token: str, login: Login) -> Response:
    face: Face = request.app.state.face
    assert face.config is not None
    response = RedirectResponse("/" if login.owner else "/chat", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(face.config.session_ttl),
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.delete_cookie("rousseau_login")
    return response


def _secure(request: Request) -> bool:
    """Cookies only over https where the page is served over https (directly, or behind a
    trusted proxy that says so: web.trusted_proxies) or the public address is https."""
    face: Face = request.app.state.face
    public = face.config.public_url if face.config is not None else ""
    return request.url.scheme == "https" or public.startswith("https://")


async def link_page(request: Request) -> Response:
    """A one-time link shows a button: opening the link alone (a chat app's preview of it)
    logs no one in. A link that cannot log in any more says so instead."""
    face: Face = request.app.state.face
    assert face.logins is not None
    token = request.query_params.get("token", "")
    state = await face.logins.link_state(token)
    return render(request, None, "link.html", token=token, state=state)


async def link(request: Request) -> Response:
    face: Face = request.app.state.face
    assert face.logins is not None
    if not face.logins.may_try(_client(request)):
        return PlainTextResponse("too many tries: wait a minute\n", status_code=429)
    token = str((await request.form()).get("token", ""))
    found = await face.logins.use_link(token) if token else None
    if found is None:
        return _login_form(request, "That link was used already, or has expired.", status=401)
    face.logins.succeeded(_client(request))
    return _logged_in(request, *found)


@guarded("call", role="chat")
async def logout(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    assert face.logins is not None
    face.logins.end(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def routes() -> list[Route]:
    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/login/link", link_page, methods=["GET"]),
        Route("/login/link", link, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
