"""Fake Twilio and Vonage SMS APIs on 127.0.0.1, speaking what their SDKs send and expect.

Twilio: Messages.json create (form body, basic auth) answering `queued`, then the message's
status moving on when it is fetched; numbers in `failing` end `undelivered` with error 30003.
Vonage: /sms/json (form body, basic auth) over TLS, as its SDK only speaks https; numbers in
`failing` get status 6 ("Unroutable message").
"""

from __future__ import annotations

import base64
import itertools
import ssl
import threading
from typing import Any

from aiohttp import web

from tests.fakes.aio import AioServer

ACCOUNT_SID = "AC" + "1" * 32
AUTH_TOKEN = "twilio-auth-token"
VONAGE_KEY = "abc123"
VONAGE_SECRET = "vonage-secret"


def _basic(request: web.Request) -> tuple[str, str]:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return "", ""
    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    return user, password


class FakeTwilio(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, str]] = []
        self.fetches = 0
        self.failing: set[str] = set()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._status: dict[str, list[str]] = {}

    def routes(self, app: web.Application) -> None:
        base = "/2010-04-01/Accounts/{sid}"
        app.router.add_get(base + ".json", self._account)
        app.router.add_post(base + "/Messages.json", self._create)
        app.router.add_get(base + "/Messages/{msid}.json", self._fetch)

    def _denied(self, request: web.Request) -> web.Response | None:
        if _basic(request) == (ACCOUNT_SID, AUTH_TOKEN) and request.match_info["sid"] == (
            ACCOUNT_SID
        ):
            return None
        body = {"code": 20003, "message": "Authenticate", "more_info": "", "status": 401}
        return web.json_response(body, status=401)

    def _message(self, sid: str, form: dict[str, str], status: str) -> dict[str, Any]:
        failed = status in ("failed", "undelivered")
        return {
            "sid": sid,
            "account_sid": ACCOUNT_SID,
            "to": form["To"],
            "from": form["From"],
            "body": form["Body"],
            "status": status,
            "num_segments": "1",
            "error_code": 30003 if failed else None,
            "error_message": "Unreachable destination handset" if failed else None,
            "date_created": "Mon, 30 Nov 2026 12:00:00 +0000",
            "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}.json",
        }

    async def _account(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        return web.json_response(
            {"sid": ACCOUNT_SID, "friendly_name": "Test account", "status": "active"}
        )

    async def _create(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        form = {k: str(v) for k, v in (await request.post()).items()}
        if not form.get("To", "").startswith("+"):
            body = {"code": 21211, "message": f"The 'To' number {form.get('To')} is not valid."}
            return web.json_response({**body, "more_info": "", "status": 400}, status=400)
        if len(form.get("Body", "")) > 1600:
            body = {"code": 21617, "message": "The concatenated message body exceeds 1600"}
            return web.json_response({**body, "more_info": "", "status": 400}, status=400)
        sid = f"SM{next(self._ids):032d}"
        steps = ["sending", "undelivered"] if form["To"] in self.failing else ["sending", "sent"]
        with self.lock:
            self.sent.append({**form, "sid": sid})
            self._status[sid] = steps
        return web.json_response(self._message(sid, form, "queued"), status=201)

    async def _fetch(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        sid = request.match_info["msid"]
        with self.lock:
            self.fetches += 1
            form = next((s for s in self.sent if s["sid"] == sid), None)
            steps = self._status.get(sid)
            if form is None or steps is None:
                return web.json_response({"code": 20404, "status": 404}, status=404)
            status = steps.pop(0) if len(steps) > 1 else steps[0]
        return web.json_response(self._message(sid, form, status))


class FakeVonage(AioServer):
    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        super().__init__(ssl_context)
        self.sent: list[dict[str, str]] = []
        self.failing: set[str] = set()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/sms/json", self._send)
        app.router.add_get("/account/get-balance", self._balance)

    async def _balance(self, request: web.Request) -> web.Response:
        if _basic(request) != (VONAGE_KEY, VONAGE_SECRET):
            return web.json_response({"error-code": "401"}, status=401)
        return web.json_response({"value": 10.5, "autoReload": False})

    async def _send(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        to = form.get("to", "")
        if _basic(request) != (VONAGE_KEY, VONAGE_SECRET):
            result = {"status": "4", "error-text": "Bad Credentials"}
        elif to in self.failing:
            result = {"to": to, "status": "6", "error-text": "Unroutable message - rejected"}
        else:
            with self.lock:
                self.sent.append(form)
            result = {
                "to": to,
                "message-id": f"{next(self._ids):016X}",
                "status": "0",
                "remaining-balance": "10.5",
                "message-price": "0.03",
                "network": "23410",
            }
        return web.json_response({"message-count": "1", "messages": [result]})
