"""A fake Google on 127.0.0.1 for a Chat app, written from the Chat API reference and Google's
OAuth 2.0 service account flow: the token endpoint (a JWT bearer grant, its signature checked
against the service account's key), Chat's signing certificates, the Chat API calls an app
makes (spaces.list, spaces.messages.create and patch, media.download) with their error body,
and Chat itself, posting interaction events to the app with a token it signed.
"""

from __future__ import annotations

import datetime
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import google.auth.crypt
import google.auth.jwt
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.fakes.aio import AioServer, post_signed

PROJECT = "123456789012"
"""The app's project number: the audience of the tokens Chat signs."""
CHAT_ISSUER = "chat@system.gserviceaccount.com"
APP = "rousseau@rousseau-test.iam.gserviceaccount.com"
OWNER = "users/100000000000000000001"
STRANGER = "users/100000000000000000666"
DM_SPACE = "spaces/dm-owner"
STRANGER_SPACE = "spaces/dm-stranger"
ROOM = "spaces/team-room"
APP_USER = "users/app"
GRANT_AUDIENCE = "https://oauth2.googleapis.com/token"
"""What a service account's grant is addressed to, wherever it is posted."""


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _certificate(key: rsa.RSAPrivateKey, name: str) -> str:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    made = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .sign(key, hashes.SHA256())
    )
    return made.public_bytes(serialization.Encoding.PEM).decode()


def _error(status: int, message: str, reason: str) -> web.Response:
    """An error as Google's APIs answer it."""
    body = {"error": {"code": status, "message": message, "status": reason}}
    return web.json_response(body, status=status)


@dataclass
class Sent:
    name: str
    space: str
    text: str
    thread: str | None
    cards: list[dict[str, Any]]
    at: float = field(default_factory=time.time)
    edits: list[tuple[float, str]] = field(default_factory=list)

    @property
    def shown(self) -> str:
        return self.edits[-1][1] if self.edits else self.text


class FakeGoogleChat(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.account_key = _key()
        self.chat_key = _key()
        self.chat_cert = _certificate(self.chat_key, "chat")
        self.sent: list[Sent] = []
        self.tokens: set[str] = set()
        self.grants = 0
        self.refuse_grants = False
        self.limited = 0
        self.media: dict[str, tuple[bytes, str]] = {}
        self._ids = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/token", self._token)
        app.router.add_get("/certs", self._certs)
        app.router.add_get("/v1/spaces", self._spaces)
        app.router.add_post("/v1/spaces/{space}/messages", self._create)
        app.router.add_patch("/v1/spaces/{space}/messages/{message}", self._patch)
        app.router.add_get("/v1/media/{resource:.*}", self._media)

    def credentials(self, folder: Path) -> Path:
        """The service account's JSON key, as the Cloud console gives it."""
        path = folder / "service-account.json"
        key = {
            "type": "service_account",
            "project_id": "rousseau-test",
            "private_key_id": "key-1",
            "private_key": _pem(self.account_key),
            "client_email": APP,
            "client_id": "100000000000000000000",
            "token_uri": f"{self.url}/token",
        }
        path.write_text(json.dumps(key))
        return path

    # -- Chat, posting events to the app ----------------------------------------------

    def token(
        self,
        *,
        audience: str = PROJECT,
        issuer: str = CHAT_ISSUER,
        age: float = 0,
        forged: bool = False,
    ) -> str:
        """A token as Chat signs one (`forged`: with a key that is not Chat's; `age`: made
        that many seconds ago, valid for an hour)."""
        key = _key() if forged else self.chat_key
        signer = google.auth.crypt.RSASigner.from_string(_pem(key), key_id="chat-key-1")
        now = int(time.time() - age)
        claims = {"iss": issuer, "aud": audience, "iat": now, "exp": now + 3600}
        return google.auth.jwt.encode(signer, claims).decode()

    def post(self, url: str, event: dict[str, Any], token: str | None = None) -> int:
        """`event` posted to the app as Chat posts it; the status (0: no one there)."""
        return post_signed(url, event, self.token() if token is None else token)

    def message(
        self,
        space: str,
        sender: str,
        said: str,
        *,
        mention: bool = False,
        before: str = "",
        thread: str | None = None,
        files: list[tuple[str, bytes, str]] = (),  # type: ignore[assignment]
        direct: bool | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE event: `said` by `sender` in `space` (mentioning the app: its name in the
        text, an annotation, and the rest in argumentText); a direct message in the two
        direct spaces, unless `direct` says."""
        number = next(self._ids)
        direct = space in (DM_SPACE, STRANGER_SPACE) if direct is None else direct
        text = f"{before}@rousseau {said}" if mention else said
        message: dict[str, Any] = {
            "name": f"{space}/messages/m{number}.m{number}",
            "sender": {"name": sender, "displayName": "Alice", "type": "HUMAN"},
            "createTime": datetime.datetime.now(datetime.UTC).isoformat(),
            "text": text,
            "thread": {"name": thread or f"{space}/threads/t{number}"},
            "space": {
                "name": space,
                "type": "DM" if direct else "ROOM",
                "spaceType": "DIRECT_MESSAGE" if direct else "SPACE",
            },
        }
        if mention:
            message["argumentText"] = f"{before} {said}"
            message["annotations"] = [
                {
                    "type": "USER_MENTION",
                    "startIndex": len(before),
                    "length": len("@rousseau"),
                    "userMention": {"user": {"name": APP_USER, "type": "BOT"}, "type": "MENTION"},
                }
            ]
        attachments = []
        for name, data, media_type in files:
            resource = f"resource-{number}-{name}"
            self.media[resource] = (data, media_type)
            attachments.append(
                {
                    "name": f"{message['name']}/attachments/a{number}",
                    "contentName": name,
                    "contentType": media_type,
                    "attachmentDataRef": {"resourceName": resource},
                    "source": "UPLOADED_CONTENT",
                }
            )
        if attachments:
            message["attachment"] = attachments
        return {
            "type": "MESSAGE",
            "eventTime": datetime.datetime.now(datetime.UTC).isoformat(),
            "message": message,
            "user": message["sender"],
            "space": message["space"],
        }

    def click(self, sent: Sent, answer: str, user: str = OWNER) -> dict[str, Any]:
        """A CARD_CLICKED event: `user` pressed the button saying `answer` on `sent`."""
        space = {"name": sent.space, "type": "DM", "spaceType": "DIRECT_MESSAGE"}
        return {
            "type": "CARD_CLICKED",
            "eventTime": datetime.datetime.now(datetime.UTC).isoformat(),
            "message": {"name": sent.name, "space": space, "sender": {"type": "BOT"}},
            "user": {"name": user, "displayName": "Alice", "type": "HUMAN"},
            "space": space,
            "action": {
                "actionMethodName": "rousseau_answer",
                "parameters": [{"key": "answer", "value": answer}],
            },
            "common": {"invokedFunction": "rousseau_answer"},
        }

    # -- Google -----------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        public = (
            self.account_key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        try:
            claims = google.auth.jwt.decode(
                str(form.get("assertion")), certs=public, audience=GRANT_AUDIENCE
            )
        except ValueError:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Invalid JWT Signature."},
                status=400,
            )
        if self.refuse_grants or claims.get("iss") != APP:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Invalid grant: account not found"},
                status=400,
            )
        self.grants += 1
        token = f"ya29.fake-{self.grants}"
        self.tokens.add(token)
        return web.json_response(
            {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}
        )

    async def _certs(self, request: web.Request) -> web.Response:
        return web.json_response({"chat-key-1": self.chat_cert})

    def _refused(self, request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or token not in self.tokens:
            return _error(401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
        if self.limited > 0:
            self.limited -= 1
            return _error(
                429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED"
            )
        return None

    async def _spaces(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return web.json_response({"spaces": [{"name": DM_SPACE, "spaceType": "DIRECT_MESSAGE"}]})

    async def _create(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        space = f"spaces/{request.match_info['space']}"
        body = await request.json()
        if len(body.get("text", "")) > 4096:
            return _error(400, "Message text is too long.", "INVALID_ARGUMENT")
        number = next(self._ids)
        thread = (body.get("thread") or {}).get("name") or f"{space}/threads/b{number}"
        sent = Sent(f"{space}/messages/b{number}", space, body.get("text", ""), thread,
                    body.get("cardsV2") or [])  # fmt: skip
        self.sent.append(sent)
        return web.json_response({"name": sent.name, "text": sent.text, "thread": {"name": thread}})

    async def _patch(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        name = f"spaces/{request.match_info['space']}/messages/{request.match_info['message']}"
        found = next((s for s in self.sent if s.name == name), None)
        if found is None:
            return _error(404, "Message not found.", "NOT_FOUND")
        if request.query.get("updateMask") != "text":
            return _error(400, "Invalid update mask.", "INVALID_ARGUMENT")
        found.edits.append((time.time(), (await request.json())["text"]))
        return web.json_response({"name": found.name, "text": found.shown})

    async def _media(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        found = self.media.get(request.match_info["resource"])
        if found is None or request.query.get("alt") != "media":
            return _error(404, "Requested entity was not found.", "NOT_FOUND")
        return web.Response(body=found[0], content_type=found[1])
