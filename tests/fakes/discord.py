"""A fake Discord on 127.0.0.1: the REST calls a bot makes (users/@me, channels, messages,
typing) and the gateway websocket (HELLO, IDENTIFY, heartbeat ACK, READY, GUILD_CREATE,
MESSAGE_CREATE, RECONNECT, RESUME), uncompressed JSON text frames.
"""

from __future__ import annotations

import datetime
import itertools
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.aio import AioServer
from tests.fakes.files import Served, stream_unmeasured

BOT_ID = "900000000000000001"
GUILD_ID = "800000000000000001"
GENERAL_ID = "800000000000000010"
OWNER_ID = "700000000000000001"
MESSAGE_CONTENT = 1 << 15  # the privileged intent


VOICE_MESSAGE = 1 << 13
"""The message flag Discord sets on a voice message."""


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON with the bare content type: discord.py reads `application/json` literally."""
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _bot_message(message_id: str, channel_id: str, content: str) -> dict[str, Any]:
    """A message the bot wrote, as the API returns it."""
    return {
        "id": message_id,
        "channel_id": channel_id,
        "author": _user(BOT_ID, "rousseau", bot=True),
        "content": content,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }


def _user(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
    }


@dataclass
class SentMessage:
    channel_id: str
    content: str
    reference: str | None
    components: list[dict[str, Any]] = field(default_factory=list)
    id: str = ""
    at: float = field(default_factory=time.time)
    files: list[tuple[str, bytes, str]] = field(default_factory=list)
    """Uploaded with the message: (file name, bytes, content type)."""
    shown: str = ""
    """What the channel shows now: the content as sent, or as last edited."""
    edited_at: list[float] = field(default_factory=list)
    flags: int = 0
    attachments: list[dict[str, Any]] = field(default_factory=list)
    """payload_json's attachments: each file's id and name (a voice message's duration_secs
    and waveform)."""


VOICE_MESSAGE = 1 << 13


class FakeDiscord(AioServer):
    def __init__(self, token: str = "discord-test-token") -> None:
        super().__init__()
        self.token = token
        self.sent: list[SentMessage] = []
        self.typing: list[str] = []
        self.reactions: list[tuple[str, str, str]] = []
        """Reactions the bot put: (channel, message, emoji)."""
        self.interaction_answers: list[tuple[str, dict[str, Any]]] = []
        self.identifies = 0
        self.resumes = 0
        self.rate_limit_once = False
        self.refuse_identify = False
        self.message_content_off = False
        """Close the gateway with 4014 for a bot asking for message content, as Discord
        does until Message Content Intent is turned on for it on the Developer Portal."""
        """Close the gateway with 4004 even for the right token, as Discord does for a token
        reset while REST still had it cached."""
        self._seq = itertools.count(2)
        self._ids = itertools.count(1)
        self._dm_channels: dict[str, str] = {}
        self.files: dict[str, bytes] = {}
        """What the fake CDN serves, by attachment id."""
        self.downloads: list[str] = []
        self.declared: dict[str, int] = {}
        """Sizes stated for attachments that are not theirs: served without a length, so
        only reading them tells (Discord always states one)."""
        self.unmeasured = Served()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        app.router.add_get("/attachments/{id}/{name}", self._cdn)

    def _attachment(
        self, name: str, data: bytes, content_type: str, declared: int | None = None
    ) -> dict[str, Any]:
        """An attachment as MESSAGE_CREATE carries it, its bytes served by the fake CDN; its
        size the `declared` one, if given."""
        attachment_id = str(400000000000000000 + next(self._ids))
        self.files[attachment_id] = data
        if declared is not None:
            self.declared[attachment_id] = declared
        url = f"{self.url}/attachments/{attachment_id}/{name}"
        return {
            "id": attachment_id,
            "filename": name,
            "size": len(data) if declared is None else declared,
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        data = self.files.get(request.match_info["id"])
        if data is None:
            return web.Response(status=404)
        self.downloads.append(request.match_info["id"])
        if request.match_info["id"] in self.declared:
            return await stream_unmeasured(
                request, data, "application/octet-stream", self.unmeasured
            )
        return web.Response(body=data, content_type="application/octet-stream")

    @property
    def api_base(self) -> str:
        return self.url + "/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.ws_url + "/gateway"

    # -- what tests do --------------------------------------------------------------------

    def dm(
        self,
        text: str,
        *,
        user_id: str = OWNER_ID,
        bot: bool = False,
        files: list[tuple[str, bytes, str]] | list[tuple[str, bytes, str, int]] | None = None,
        voice_seconds: float = 0,
    ) -> dict[str, Any]:
        channel = self._dm_channels.setdefault(user_id, str(600000000000000000 + int(user_id[-6:])))
        return self.message(
            text,
            channel_id=channel,
            user_id=user_id,
            guild=False,
            bot=bot,
            files=files or [],
            voice_seconds=voice_seconds,
        )

    def message(self, text: str, **made: Any) -> dict[str, Any]:
        """Dispatch a MESSAGE_CREATE as Discord would (see `message_data`); returns the
        message (to send it again)."""
        data = self.message_data(text, **made)
        self.dispatch("MESSAGE_CREATE", data)
        return data

    def message_data(
        self,
        text: str,
        *,
        channel_id: str = GENERAL_ID,
        user_id: str = OWNER_ID,
        guild: bool = True,
        mention_bot: bool = False,
        everyone: bool = False,
        reply_to_bot: bool = False,
        bot: bool = False,
        files: list[tuple[str, bytes, str]] | list[tuple[str, bytes, str, int]] | None = None,
        voice_seconds: float = 0,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE's message as Discord would send it, not dispatched (a test may
        spoil it first). `files` = [(file name, bytes, content type[, stated size])] become
        attachments on the fake CDN; with `voice_seconds` the message is a voice message
        (its flag, its duration)."""
        content = (
            f"<@{BOT_ID}> {text}" if mention_bot else ("@everyone " + text if everyone else text)
        )
        data: dict[str, Any] = {
            "id": str(100000000000000000 + next(self._ids)),
            "channel_id": channel_id,
            "author": _user(
                BOT_ID if bot and user_id == BOT_ID else user_id, f"user{user_id[-3:]}", bot=bot
            ),
            "content": content,
            "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": everyone,
            "mentions": [_user(BOT_ID, "rousseau", bot=True)] if mention_bot else [],
            "mention_roles": [],
            "attachments": [self._attachment(*f) for f in files or []],
            "embeds": [],
            "pinned": False,
            "type": 19 if reply_to_bot else 0,
            "flags": VOICE_MESSAGE if voice_seconds else 0,
        }
        if voice_seconds:
            for attachment in data["attachments"]:
                attachment["duration_secs"] = voice_seconds
                attachment["waveform"] = "AAAA"
        if guild:
            data["guild_id"] = GUILD_ID
            data["member"] = {
                "roles": [],
                "joined_at": "2024-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
            }
        if reply_to_bot:
            earlier = {
                **data,
                "id": "100000000000000000",
                "author": _user(BOT_ID, "rousseau", bot=True),
                "content": "an earlier answer",
                "type": 0,
            }
            earlier.pop("member", None)
            data["referenced_message"] = earlier
            data["message_reference"] = {"message_id": earlier["id"], "channel_id": channel_id}
        return data

    def press(self, sent: SentMessage, label: str, *, user_id: str = OWNER_ID) -> str:
        """Press a button under a message the bot sent: an INTERACTION_CREATE, as Discord
        dispatches it; returns the interaction id."""
        custom_id = next(
            c["custom_id"]
            for row in sent.components
            for c in row.get("components", [])
            if c.get("label") == label
        )
        interaction_id = str(300000000000000000 + next(self._ids))
        guild = sent.channel_id == GENERAL_ID
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": BOT_ID,
            "type": 3,
            "data": {"custom_id": custom_id, "component_type": 2},
            "channel_id": sent.channel_id,
            "channel": {"id": sent.channel_id, "type": 0 if guild else 1},
            "token": f"interaction-token-{interaction_id}",
            "version": 1,
            "locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "attachment_size_limit": 10485760,
            "message": {
                **_bot_message(sent.id, sent.channel_id, sent.content),
                "components": sent.components,
            },
        }
        if guild:
            data["guild_id"] = GUILD_ID
            data["member"] = {
                "user": _user(user_id, f"user{user_id[-3:]}"),
                "roles": [],
                "joined_at": "2024-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "permissions": "0",
                "flags": 0,
            }
        else:
            data["user"] = _user(user_id, f"user{user_id[-3:]}")
        self.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    def redeliver(self, data: dict[str, Any]) -> None:
        self.dispatch("MESSAGE_CREATE", data)

    def reconnect(self) -> None:
        """Discord asking the client to reconnect and resume (op 7)."""
        self._send({"op": 7, "d": None})

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        self._send({"op": 0, "t": event, "s": next(self._seq), "d": data})

    def wait_ready(self, identifies: int = 1, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.identifies < identifies or not self.sockets:
            if time.monotonic() > deadline:
                raise AssertionError("the bot never identified")
            time.sleep(0.02)

    def _send(self, frame: dict[str, Any]) -> None:
        self.wait_ready()
        self.run(self.sockets[-1].send_str(json.dumps(frame)))

    # -- REST -----------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        if path.startswith("interactions/") and path.endswith("/callback"):
            # the interaction's own token authorises its answer, not the bot's
            self.interaction_answers.append((path.split("/")[1], await request.json()))
            return web.Response(status=204)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if path == "users/@me":
            return _json(_user(BOT_ID, "rousseau", bot=True))
        if path == "oauth2/applications/@me":
            return _json(
                {
                    "id": BOT_ID,
                    "name": "rousseau",
                    "icon": None,
                    "description": "",
                    "bot_public": False,
                    "bot_require_code_grant": False,
                    "owner": _user(OWNER_ID, "owner"),
                    "team": None,
                    "verify_key": "0" * 64,
                    "flags": 0,
                    "summary": "",
                }
            )
        if path in ("gateway", "gateway/bot"):
            return _json(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 999,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            )
        parts = path.split("/")
        if parts[0] == "channels" and len(parts) == 3 and parts[2] == "typing":
            self.typing.append(parts[1])
            return web.Response(status=204)
        if parts[:1] == ["channels"] and len(parts) == 7 and parts[4] == "reactions":
            self.reactions.append((parts[1], parts[3], urllib.parse.unquote(parts[5])))
            return web.Response(status=204)
        if parts[0] == "channels" and len(parts) == 4 and parts[2] == "messages":
            return await self._edit_message(request, parts[1], parts[3])
        if parts[0] == "channels" and len(parts) == 3 and parts[2] == "messages":
            return await self._create_message(request, parts[1])
        if parts[0] == "channels" and len(parts) == 2:
            if parts[1] == GENERAL_ID:
                return _json(self._text_channel())
            owner = next((u for u, c in self._dm_channels.items() if c == parts[1]), OWNER_ID)
            return _json({"id": parts[1], "type": 1, "recipients": [_user(owner, "owner")]})
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    async def _create_message(self, request: web.Request, channel_id: str) -> web.Response:
        """POST channels/ID/messages: JSON, or multipart (payload_json and files[n])."""
        if self.rate_limit_once:
            self.rate_limit_once = False
            return _json(
                {"message": "You are being rate limited.", "retry_after": 0.3, "global": False},
                status=429,
                headers={"Retry-After": "0.3", "X-RateLimit-Scope": "user"},
            )
        files: list[tuple[str, bytes, str]] = []
        if request.content_type == "multipart/form-data":  # payload_json and files[n]
            body = {}
            async for part in await request.multipart():
                if part.name == "payload_json":
                    body = json.loads(await part.read())
                elif part.name and part.name.startswith("files["):
                    content_type = part.headers.get("Content-Type", "")
                    files.append((part.filename or "", bytes(await part.read()), content_type))
        else:
            body = await request.json()
        flags = int(body.get("flags") or 0)
        if flags & VOICE_MESSAGE and not _voice_message_ok(body, files):
            error = {"message": "Invalid Form Body", "code": 50035}  # as Discord refuses one
            return _json(error, status=400)
        ref = (body.get("message_reference") or {}).get("message_id")
        ref = str(ref) if ref is not None else None
        message_id = str(200000000000000000 + next(self._ids))
        self.sent.append(
            SentMessage(
                channel_id=channel_id,
                content=body.get("content") or "",
                reference=ref,
                components=body.get("components") or [],
                id=message_id,
                files=files,
                shown=body.get("content") or "",
                flags=flags,
                attachments=list(body.get("attachments") or []),
            )
        )
        return _json(_bot_message(message_id, channel_id, body.get("content") or ""))

    async def _edit_message(
        self, request: web.Request, channel_id: str, message_id: str
    ) -> web.Response:
        """PATCH channels/ID/messages/ID: the message shows the new content from now on."""
        found = next((m for m in self.sent if m.id == message_id), None)
        if request.method != "PATCH" or found is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        body = await request.json()
        found.shown = body.get("content") or ""
        found.edited_at.append(time.time())
        return _json(_bot_message(message_id, channel_id, found.shown))

    def _text_channel(self) -> dict[str, Any]:
        return {
            "id": GENERAL_ID,
            "type": 0,
            "guild_id": GUILD_ID,
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
        }

    # -- gateway --------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op = frame.get("op")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2:
                    await self._identify(ws, frame["d"])
                elif op == 6:
                    self.resumes += 1
                    await ws.send_str(
                        json.dumps({"op": 0, "t": "RESUMED", "s": next(self._seq), "d": {}})
                    )
        finally:
            self.sockets.remove(ws)
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        if data.get("token") != self.token or self.refuse_identify:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if self.message_content_off and int(data.get("intents", 0)) & MESSAGE_CONTENT:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = {
            "v": 10,
            "user": _user(BOT_ID, "rousseau", bot=True),
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": "fake-session",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": BOT_ID, "flags": 0},
        }
        await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": 1, "d": ready}))
        guild = {
            "id": GUILD_ID,
            "name": "Test Guild",
            "owner_id": OWNER_ID,
            "unavailable": False,
            "member_count": 2,
            "roles": [
                {
                    "id": GUILD_ID,
                    "name": "@everyone",
                    "permissions": "68608",
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "channels": [self._text_channel()],
            "members": [],
            "threads": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "voice_states": [],
            "presences": [],
            "joined_at": "2024-01-01T00:00:00+00:00",
            "large": False,
        }
        await ws.send_str(
            json.dumps({"op": 0, "t": "GUILD_CREATE", "s": next(self._seq), "d": guild})
        )
        self.identifies += 1


def _voice_message_ok(body: dict[str, Any], files: list[tuple[str, bytes, str]]) -> bool:
    """A voice message as Discord takes one: no text, a single audio file, its attachment
    entry with a duration and a base64 waveform of at most 256 bytes."""
    import base64

    listed = body.get("attachments") or []
    if body.get("content") or len(files) != 1 or len(listed) != 1:
        return False
    entry = listed[0]
    try:
        waveform = base64.b64decode(entry.get("waveform") or "", validate=True)
    except ValueError:
        return False
    seconds = entry.get("duration_secs")
    return isinstance(seconds, int | float) and seconds > 0 and 0 < len(waveform) <= 256
