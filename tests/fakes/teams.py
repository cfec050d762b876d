"""A fake Microsoft Teams on 127.0.0.1 for a bot, written from the Bot Framework REST
reference and its authentication page: Entra's token endpoint (a client-credentials grant, its
AADSTS error bodies), the Bot Framework's signing keys (a JWKS with the msteams endorsement),
the Bot Connector calls a bot makes (create and update an activity, typing) and Teams itself,
posting activities to the bot's messaging endpoint with a token it signed.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.aio import AioServer, post_signed

APP_ID = "00000000-0000-4000-8000-00000000b07a"
PASSWORD = "teams-client-secret"
TENANT = "11111111-1111-4111-8111-111111111111"
ISSUER = "https://api.botframework.com"
OWNER = "aaaaaaaa-0000-4000-8000-000000000001"
STRANGER = "aaaaaaaa-0000-4000-8000-000000000666"
PERSONAL = "a:1personal-owner"
STRANGER_CHAT = "a:1personal-stranger"
CHANNEL = "19:general@thread.tacv2"
KID = "teams-key-1"
CONSENT = "application/vnd.microsoft.teams.card.file.consent"
SENT_FILE = "application/vnd.microsoft.teams.card.file.info"


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass
class Posted:
    conversation: str
    id: str
    text: str
    attachments: list[dict[str, Any]]
    kind: str = "message"
    at: float = field(default_factory=time.time)
    edits: list[tuple[float, str]] = field(default_factory=list)

    @property
    def chat(self) -> str:
        return self.conversation.partition(";messageid=")[0]

    @property
    def thread(self) -> str | None:
        return self.conversation.partition(";messageid=")[2] or None

    @property
    def shown(self) -> str:
        return self.edits[-1][1] if self.edits else self.text


class FakeTeams(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.posted: list[Posted] = []
        self.tokens: set[str] = set()
        self.grants = 0
        self.limited = 0
        """How many of the next message activities to answer 429."""
        self.files: dict[str, tuple[bytes, str]] = {}
        self.uploads: dict[str, bytes] = {}
        """What the bot put in the person's OneDrive, by the file's unique id."""
        self.bot_endpoint = ""
        """Where the person's answer to a file's consent card is posted (empty: nobody)."""
        self.consent = "accept"
        """What the person answers a consent card: accept or decline."""
        self._ids = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_get("/keys", self._keys)
        app.router.add_post("/v3/conversations/{conversation}/activities", self._create)
        app.router.add_put("/v3/conversations/{conversation}/activities/{id}", self._update)
        app.router.add_get("/download/{id}", self._download)
        app.router.add_put("/upload/{id}", self._upload)

    @property
    def keys_url(self) -> str:
        return f"{self.url}/keys"

    # -- Teams, posting activities to the bot -----------------------------------------

    def token(
        self,
        *,
        audience: str = APP_ID,
        issuer: str = ISSUER,
        service_url: str | None = None,
        age: float = 0,
        forged: bool = False,
    ) -> str:
        """A token as the Bot Framework signs one for an activity (`forged`: another key)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if forged else self.key
        now = int(time.time() - age)
        claims = {
            "iss": issuer,
            "aud": audience,
            "serviceurl": service_url or self.url,
            "nbf": now,
            "iat": now,
            "exp": now + 3600,
        }
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})

    def post(self, endpoint: str, activity: dict[str, Any], token: str | None = None) -> int:
        """`activity` posted to the bot as Teams posts it; the status (0: no one there)."""
        return post_signed(endpoint, activity, self.token() if token is None else token)

    def message(
        self,
        conversation: str,
        user: str,
        said: str,
        *,
        mention: bool = False,
        before: str = "",
        value: dict[str, Any] | None = None,
        bot: bool = False,
        files: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """A message activity from `user` in `conversation` (mentioning the bot: <at> in the
        text and a mention entity, as Teams writes them)."""
        number = next(self._ids)
        personal = conversation.startswith("a:")
        activity_id = f"17000000000{number:02d}"
        text = f"{before}<at>rousseau</at> {said}" if mention else said
        activity: dict[str, Any] = {
            "type": "message",
            "id": activity_id,
            "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
            "serviceUrl": self.url,
            "channelId": "msteams",
            "from": (
                {"id": f"28:{APP_ID}", "name": "rousseau"}
                if bot
                else {"id": f"29:1{user[:8]}", "name": "Alice", "aadObjectId": user}
            ),
            "conversation": {
                "id": conversation if personal else f"{conversation};messageid={activity_id}",
                "conversationType": "personal" if personal else "channel",
                "tenantId": TENANT,
            },
            "recipient": {"id": f"28:{APP_ID}", "name": "rousseau"},
            "text": text,
            "textFormat": "plain",
            "channelData": {"tenant": {"id": TENANT}},
        }
        if mention:
            activity["entities"] = [
                {
                    "type": "mention",
                    "mentioned": {"id": f"28:{APP_ID}", "name": "rousseau"},
                    "text": "<at>rousseau</at>",
                }
            ]
        if value is not None:
            activity["value"] = value
            activity["text"] = ""
        attachments = []
        for name, data in files:  # as a personal chat's upload arrives: a download link
            file_id = f"file-{number}-{len(attachments)}"
            self.files[file_id] = (data, name)
            attachments.append(
                {
                    "contentType": "application/vnd.microsoft.teams.file.download.info",
                    "contentUrl": f"https://contoso.sharepoint.com/personal/{name}",
                    "name": name,
                    "content": {
                        "downloadUrl": f"{self.url}/download/{file_id}?tempauth=x",
                        "uniqueId": file_id,
                        "fileType": name.rpartition(".")[2],
                    },
                }
            )
        if attachments:
            activity["attachments"] = attachments
        return activity

    # -- Microsoft --------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("client_id") != APP_ID or form.get("client_secret") != PASSWORD:
            return web.json_response(
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided. "
                    "Ensure the secret being sent in the request is the client secret value.",
                    "error_codes": [7000215],
                },
                status=401,
            )
        if form.get("scope") != "https://api.botframework.com/.default":
            return web.json_response({"error": "invalid_scope"}, status=400)
        self.grants += 1
        token = f"eyJ.fake-{self.grants}"
        self.tokens.add(token)
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "access_token": token}
        )

    async def _keys(self, request: web.Request) -> web.Response:
        numbers = self.key.public_key().public_numbers()
        key = {
            "kty": "RSA",
            "use": "sig",
            "kid": KID,
            "n": _b64(numbers.n),
            "e": _b64(numbers.e),
            "endorsements": ["msteams"],
        }
        return web.json_response({"keys": [key]})

    def _refused(self, request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or token not in self.tokens:
            return web.json_response(
                {"message": "Authorization has been denied for this request."}, status=401
            )
        return None

    def _throttled(self) -> web.Response | None:
        """The Connector's 429, while `limited` says (message activities only)."""
        if self.limited <= 0:
            return None
        self.limited -= 1
        return web.json_response(
            {"error": {"code": "TooManyRequests", "message": "Too many requests"}},
            status=429,
            headers={"Retry-After": "1"},
        )

    async def _create(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        body = await request.json()
        if body.get("type", "message") == "message" and (limited := self._throttled()):
            return limited
        posted = Posted(
            request.match_info["conversation"],
            f"1800000000{next(self._ids):03d}",
            body.get("text") or "",
            body.get("attachments") or [],
            body.get("type", "message"),
        )
        self.posted.append(posted)
        for card in posted.attachments:
            if card.get("contentType") == CONSENT and self.bot_endpoint:
                self._say_yes(posted, card)
        return web.json_response({"id": posted.id} if posted.kind == "message" else {})

    def _say_yes(self, posted: Posted, card: dict[str, Any]) -> None:
        """The person accepts a file's consent card: Teams posts the invoke, with where to
        upload the file (as the file consent flow documents), from a thread of its own."""
        import threading

        unique = f"upload-{next(self._ids)}"
        name = card.get("name") or "file"
        invoke = {
            "type": "invoke",
            "name": "fileConsent/invoke",
            "id": f"f{unique}",
            "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
            "serviceUrl": self.url,
            "channelId": "msteams",
            "from": {"id": "29:1owner", "name": "Alice", "aadObjectId": OWNER},
            "conversation": {"id": posted.conversation, "conversationType": "personal"},
            "recipient": {"id": f"28:{APP_ID}", "name": "rousseau"},
            "value": {
                "type": "fileUpload",
                "action": self.consent,
                "context": card["content"]["acceptContext"],
                "uploadInfo": {
                    "contentUrl": f"https://contoso-my.sharepoint.com/personal/{name}",
                    "name": name,
                    "uploadUrl": f"{self.url}/upload/{unique}",
                    "uniqueId": unique,
                    "fileType": name.rpartition(".")[2],
                },
            },
        }
        endpoint = self.bot_endpoint
        threading.Thread(target=lambda: self.post(endpoint, invoke), daemon=True).start()

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        expected = f"bytes 0-{len(data) - 1}/{len(data)}"
        if request.headers.get("Content-Range") != expected:
            return web.json_response({"error": {"code": "invalidRange"}}, status=416)
        self.uploads[request.match_info["id"]] = data
        return web.json_response({"id": request.match_info["id"], "size": len(data)}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        found = next((p for p in self.posted if p.id == request.match_info["id"]), None)
        if found is None:
            return web.json_response(
                {"error": {"code": "NotFound", "message": "Activity not found"}}, status=404
            )
        found.edits.append((time.time(), (await request.json()).get("text") or ""))
        return web.json_response({"id": found.id})

    async def _download(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["id"])
        if found is None or "tempauth" not in request.query:
            return web.Response(status=404)
        return web.Response(body=found[0], content_type="application/octet-stream")

    def messages(self) -> list[Posted]:
        return [p for p in self.posted if p.kind == "message"]
