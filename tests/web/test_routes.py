"""Every route of the web face refuses without a login (or key); every form refuses
without its CSRF token; logins are rate-limited; pages carry the security headers and
never a secret."""

from __future__ import annotations

import re

import pytest

from rousseau.config import WebConfig
from rousseau.metrics import Metrics
from rousseau.web.app import Face, build
from tests.web.conftest import ALICE_KEY, PASSWORD, PROXY, WebDaemon

OPEN = {"/healthz", "/metrics", "/login", "/login/link", "/favicon.ico"}
"""Routes anyone may request (the login form and health, as before)."""


def _routes() -> list[tuple[str, str]]:
    """Every (method, path) the web face serves, read from the app itself, so a route
    added later is checked too; path parameters filled with a plausible value."""
    app = build(Face(health=dict, metrics=Metrics(), config=WebConfig()))
    found = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/static"):
            continue
        filled = re.sub(
            r"\{(\w+)(:\w+)?\}", lambda m: "ABCD" if m.group(1) != "verb" else "approve", path
        )
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            if method != "HEAD":
                found.append((method, filled))
    return found


ROUTES = _routes()


def test_the_route_list_is_whole() -> None:
    paths = {p for _, p in ROUTES}
    for expected in ("/", "/approvals", "/pairings", "/sessions", "/cron", "/audit", "/usage",
                     "/chat", "/chat/send", "/chat/events", "/live", "/v1/models",
                     "/v1/chat/completions", "/cron/add", "/memory"):  # fmt: skip
        assert expected in paths


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1] not in OPEN])
def test_every_route_refuses_without_a_login(web_daemon: WebDaemon, method: str, path: str) -> None:
    with web_daemon.client() as client:
        answer = client.request(method, path)
        if path.startswith("/v1/"):
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "invalid_api_key"
        elif method == "GET" and path not in ("/live", "/chat/events", "/chat/voice/ABCD"):
            assert answer.status_code == 303 and answer.headers["location"] == "/login"
        else:
            assert answer.status_code == 401
        # a stranger's cookie is no login either
        client.cookies.set("rousseau_session", "made-up")
        again = client.request(method, path)
        assert again.status_code == answer.status_code


@pytest.mark.parametrize(
    ("method", "path"),
    [r for r in ROUTES if r[0] == "POST" and not r[1].startswith(("/v1", "/login"))],
)
def test_every_form_refuses_without_its_csrf_token(
    web_daemon: WebDaemon, method: str, path: str
) -> None:
    with web_daemon.logged_in() as client:
        missing = client.post(path, data={"text": "hi", "name": "x"})
        wrong = client.post(path, data={"csrf": "not-the-token", "text": "hi"})
        assert missing.status_code == 403 and wrong.status_code == 403
        assert "CSRF" in missing.text


def test_a_chat_user_sees_the_chat_and_not_the_dashboard(web_daemon: WebDaemon) -> None:
    with web_daemon.logged_in("carol", "carol's own password") as client:
        assert client.get("/chat").status_code == 200
        for path in ("/", "/sessions", "/approvals", "/cron"):
            assert client.get(path).status_code == 403


def test_the_login_form_needs_its_own_csrf_token(web_daemon: WebDaemon) -> None:
    with web_daemon.client() as client:
        answer = client.post("/login", data={"user": "owner", "password": PASSWORD})
        assert answer.status_code == 403


def test_a_wrong_password_is_refused_and_the_fifth_try_a_minute_is_limited(
    web_daemon: WebDaemon,
) -> None:
    # The limit is per client address: these tries come from 127.0.0.2.
    import httpx

    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=web_daemon.url, transport=transport) as client:
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
        assert token is not None
        answers = [
            client.post(
                "/login", data={"csrf": token.group(1), "user": "owner", "password": f"guess{i}"}
            )
            for i in range(4)
        ]
        assert [a.status_code for a in answers] == [401] * 4
        assert "Wrong name or password" in answers[0].text
        assert "rousseau_session" not in client.cookies
        fifth = client.post(
            "/login", data={"csrf": token.group(1), "user": "owner", "password": PASSWORD}
        )
        assert fifth.status_code == 429  # even the right password, within the minute
        assert "rousseau_session" not in client.cookies


def test_the_session_cookie_is_httponly_and_strict(web_daemon: WebDaemon) -> None:
    with web_daemon.client() as client:
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
        assert token is not None
        done = client.post(
            "/login", data={"csrf": token.group(1), "user": "owner", "password": PASSWORD}
        )
        cookie = next(
            v
            for k, v in done.headers.multi_items()
            if k == "set-cookie" and v.startswith("rousseau_session=")
        )
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    # Behind a trusted proxy that says https, the cookie is Secure; any other local process
    # saying so is not believed.
    import httpx

    for local, secure in (("127.0.0.1", False), (PROXY, True)):
        transport = httpx.HTTPTransport(local_address=local)
        with httpx.Client(base_url=web_daemon.url, transport=transport) as client:
            token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
            assert token is not None
            done = client.post(
                "/login",
                data={"csrf": token.group(1), "user": "owner", "password": PASSWORD},
                headers={"x-forwarded-proto": "https"},
            )
            cookie = next(
                v
                for k, v in done.headers.multi_items()
                if k == "set-cookie" and v.startswith("rousseau_session=")
            )
            assert ("Secure" in cookie) is secure, local


def test_pages_carry_the_security_headers_and_no_secret(web_daemon: WebDaemon) -> None:
    config = web_daemon.config.read_text()
    secrets = [web_daemon.telegram.token, ALICE_KEY, "sk-test"]
    secrets += re.findall(r'"(\$argon2id\$[^"]+)"', config)
    with web_daemon.logged_in() as client:
        for path in (
            "/",
            "/approvals",
            "/pairings",
            "/sessions",
            "/cron",
            "/audit",
            "/usage",
            "/chat",
        ):
            page = client.get(path)
            assert page.status_code == 200, path
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["x-content-type-options"] == "nosniff"
            assert "<script>" not in page.text  # no inline script anywhere
            for secret in secrets:
                assert secret not in page.text, (path, secret[:8])


def test_health_and_metrics_answer_as_before(web_daemon: WebDaemon) -> None:
    with web_daemon.client() as client:
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["transports"]["telegram"] == {"connected": True}
        assert health.json()["transports"]["web"] == {"connected": True}
        assert "rousseau_inbound_messages_total" in client.get("/metrics").text
        assert client.get("/nothing-here").status_code == 404


def test_a_one_time_link_logs_the_owner_in_once(web_daemon: WebDaemon) -> None:
    made = web_daemon.rousseau("web", "link")
    assert made.returncode == 0, made.stderr
    link = made.stdout.strip()
    assert link.startswith(web_daemon.url + "/login/link?token=")
    token = link.split("token=")[1]
    with web_daemon.client() as client:
        shown = client.get(link)  # opening it (a chat app's preview) logs no one in
        assert shown.status_code == 200 and "rousseau_session" not in client.cookies
        assert "Log in as the owner" in shown.text
        used = client.post("/login/link", data={"token": token})
        assert used.status_code == 303 and "rousseau_session" in client.cookies
        assert client.get("/").status_code == 200
    with web_daemon.client() as again:
        opened = again.get(link)  # a used link says so, where it showed the same button
        assert "This link was used already" in opened.text
        assert "Log in as the owner" not in opened.text
        assert again.post("/login/link", data={"token": token}).status_code == 401
        icon = again.get("/favicon.ico")  # asked for by every page: not a 404 in the log
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
