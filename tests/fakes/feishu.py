"""A fake Feishu open platform on 127.0.0.1, written from its documentation: the tenant
access token (auth/v3/tenant_access_token/internal), the long connection's endpoint
(/callback/ws/endpoint) and its websocket, whose frames are the platform's protobuf `Frame`
(encoded here by hand, not with the SDK's classes), the bot's info, chats, messages (send,
reply, card update), image and file uploads and message resources, with bearer tokens, the
documented error bodies ({"code", "msg"}) and the rate limiter's answer (429, code 99991400,
x-ogw-ratelimit-reset).

Events go out as data frames of type "event" and the client answers each on the same frame
with {"code": 200}; an event sent while no client is connected waits for one, as Feishu
keeps and retries what it could not deliver.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

from tests.fakes.aio import AioServer
from tests.fakes.files import Served, stream_unmeasured

APP_ID = "cli_a1b2c3d4e5f60708"
APP_SECRET = "feishu-app-secret-0123456789abcdef"
BOT_ID = "ou_" + "b" * 32
OWNER_ID = "ou_" + "0" * 32
STRANGER_ID = "ou_" + "5" * 32
DM_CHAT = "oc_" + "d" * 32
STRANGER_DM = "oc_" + "e" * 32
GROUP_CHAT = "oc_" + "9" * 32
MODES = {DM_CHAT: "p2p", STRANGER_DM: "p2p", GROUP_CHAT: "group"}
NAMES = {BOT_ID: "rousseau", OWNER_ID: "alice", STRANGER_ID: "eve"}
CONTROL, DATA = 0, 1
"""A frame's method."""
SERVICE = 7


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


def _error(status: int, code: int, msg: str, **headers: str) -> web.Response:
    return web.json_response({"code": code, "msg": msg, "data": {}}, status=status, headers=headers)


# -- the frame's protobuf, by hand (pbbp2.proto: Frame {SeqID=1, LogID=2, service=3,
# method=4, headers=5 (Header {key=1, value=2}), payload_encoding=6, payload_type=7,
# payload=8, LogIDNew=9}) -------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def encode_frame(method: int, headers: dict[str, str], payload: bytes = b"", seq: int = 0) -> bytes:
    out = _field(1, seq) + _field(2, 0) + _field(3, SERVICE) + _field(4, method)
    for key, value in headers.items():
        out += _field(5, _field(1, key.encode()) + _field(2, value.encode()))
    return out + _field(8, payload) if payload else out


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A message's fields in order (varints and length-delimited ones: all Frame has)."""
    found: list[tuple[int, int | bytes]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        n, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return n

    while at < len(data):
        key = varint()
        if key & 7 == 0:
            found.append((key >> 3, varint()))
        elif key & 7 == 2:
            size = varint()
            found.append((key >> 3, data[at : at + size]))
            at += size
        else:
            raise ValueError(f"wire type {key & 7} is not in a Frame")
    return found


def decode_frame(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """A frame's method, headers and payload."""
    method, headers, payload = -1, {}, b""
    for number, value in _fields(data):
        if number == 4 and isinstance(value, int):
            method = value
        elif number == 5 and isinstance(value, bytes):
            pair = dict(_fields(value))
            headers[bytes(pair[1]).decode()] = bytes(pair[2]).decode()  # type: ignore[arg-type]
        elif number == 8 and isinstance(value, bytes):
            payload = value
    return method, headers, payload


@dataclass
class Sent:
    """A message the bot sent."""

    message_id: str
    chat_id: str
    msg_type: str
    content: dict[str, Any]
    reply_to: str | None = None
    updates: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    @property
    def shown(self) -> str:
        """What the chat shows of it now: a text's words, a card's Markdown."""
        return self._words(self.updates[-1][1] if self.updates else self.content)

    @property
    def first(self) -> str:
        """What it showed when sent (before any update)."""
        return self._words(self.content)

    def _words(self, content: dict[str, Any]) -> str:
        if self.msg_type == "text":
            return str(content.get("text", ""))
        if self.msg_type == "interactive":
            return str(content["elements"][0]["content"])
        if self.msg_type == "post":
            [post] = content.values()
            words = [e.get("text", "") for p in post["content"] for e in p if e["tag"] == "text"]
            return "\n".join(words)
        return ""

    @property
    def keys(self) -> list[str]:
        """The files it shows (an image's or a file's key; a rich text's images)."""
        if self.msg_type == "post":
            [post] = self.content.values()
            return [e["image_key"] for p in post["content"] for e in p if e["tag"] == "img"]
        key = self.content.get("image_key") or self.content.get("file_key")
        return [key] if key else []

    @property
    def buttons(self) -> list[str]:
        content = self.updates[-1][1] if self.updates else self.content
        if self.msg_type != "interactive":
            return []
        actions = [a for e in content["elements"] if e["tag"] == "action" for a in e["actions"]]
        return [a["text"]["content"] for a in actions]


@dataclass
class Stored:
    key: str
    name: str
    data: bytes
    mime_type: str
    kind: str
    """image or file (as uploaded, and as the resource is asked for)."""
    message_id: str = ""
    declared: int | None = None
    """Served without a length (the API states no size anyway)."""


@dataclass
class Event:
    frame_id: str
    body: dict[str, Any]
    answers: list[dict[str, Any]] = field(default_factory=list)
    """Each answer the client sent on the event's frame ({"code", "data"})."""


class FakeFeishu(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.app_secret = APP_SECRET
        self.token = "t-" + secrets.token_hex(16)
        self.sent: list[Sent] = []
        self.files: dict[str, Stored] = {}
        self.events: list[Event] = []
        self.waiting: list[Event] = []
        """Events sent while no client was connected (delivered when one is)."""
        self.limited = 0
        """How many of the next API calls to answer 429."""
        self.reactions: list[tuple[str, str]] = []
        """(message id, emoji_type) of each reaction the bot put."""
        self.endpoints = 0
        self.pings = 0
        self.unmeasured = Served()
        self._seq = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.middlewares.append(self._guard)
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/open-apis/bot/v3/info", self._bot)
        app.router.add_get("/open-apis/im/v1/chats/{id}", self._chat)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_post("/open-apis/im/v1/messages/{id}/reply", self._reply)
        app.router.add_patch("/open-apis/im/v1/messages/{id}", self._patch)
        app.router.add_post("/open-apis/im/v1/images", self._upload_image)
        app.router.add_post("/open-apis/im/v1/files", self._upload_file)
        app.router.add_get("/open-apis/im/v1/messages/{id}/resources/{key}", self._resource)
        app.router.add_post("/open-apis/im/v1/messages/{id}/reactions", self._react)

    # -- what people do ------------------------------------------------------------------

    def say(
        self,
        user_id: str,
        chat_id: str,
        text: str = "",
        *,
        mention: bool = False,
        root_id: str = "",
        kind: str = "text",
        content: dict[str, Any] | None = None,
        app_id: str = APP_ID,
        sender_type: str = "user",
        message_id: str = "",
    ) -> Event:
        """A message by `user_id`, pushed to the bot as im.message.receive_v1 (`mention`: it
        @-mentions the bot, the text carrying the mention's key where it was typed, or at
        its start)."""
        mentions = []
        if mention:
            mentions.append(
                {
                    "key": "@_user_1",
                    "id": {"open_id": BOT_ID, "union_id": "on_x", "user_id": None},
                    "name": NAMES[BOT_ID],
                    "tenant_key": "tenant0",
                }
            )
            if "@_user_1" not in text:
                text = f"@_user_1 {text}"
        message_id = message_id or _id("om_")
        message = {
            "message_id": message_id,
            "root_id": root_id,
            "parent_id": root_id,
            "create_time": str(int(time.time() * 1000)),
            "update_time": str(int(time.time() * 1000)),
            "chat_id": chat_id,
            "chat_type": MODES.get(chat_id, "group"),
            "message_type": kind,
            "content": json.dumps(content if content is not None else {"text": text}),
            "mentions": mentions or None,
            "user_agent": "Mozilla/5.0",
        }
        sender = {
            "sender_id": {"union_id": "on_" + user_id[3:], "user_id": None, "open_id": user_id},
            "sender_type": sender_type,
            "tenant_key": "tenant0",
        }
        return self.push("im.message.receive_v1", {"sender": sender, "message": message}, app_id)

    def send_file(
        self,
        user_id: str,
        chat_id: str,
        name: str,
        data: bytes,
        mime_type: str,
        *,
        kind: str = "file",
        declared: int | None = None,
        words: str = "",
    ) -> Event:
        """An image, file or voice message (kind: image, file, audio) by `user_id`; an image
        with `words` is rich text (a post), as the app sends one."""
        key = _id("img_v3_" if kind == "image" else "file_v3_")
        stored = Stored(key, name, data, mime_type, "image" if kind == "image" else "file")
        stored.declared = declared
        self.files[key] = stored
        if kind == "image" and words:
            paragraphs = [[{"tag": "img", "image_key": key}], [{"tag": "text", "text": words}]]
            content: dict[str, Any] = {"title": "", "content": paragraphs}
            kind = "post"
        elif kind == "image":
            content = {"image_key": key}
        elif kind == "audio":
            content = {"file_key": key, "duration": 3000}
        else:
            content = {"file_key": key, "file_name": name}
        stored.message_id = _id("om_")
        return self.say(user_id, chat_id, kind=kind, content=content, message_id=stored.message_id)

    def press(self, sent: Sent, label: str, user_id: str = OWNER_ID) -> Event:
        """`user_id` presses the button `label` of the bot's card: card.action.trigger."""
        content = sent.updates[-1][1] if sent.updates else sent.content
        actions = [a for e in content["elements"] if e["tag"] == "action" for a in e["actions"]]
        [button] = [a for a in actions if a["text"]["content"] == label]
        event = {
            "operator": {
                "tenant_key": "tenant0",
                "user_id": None,
                "open_id": user_id,
                "union_id": "on_" + user_id[3:],
            },
            "token": "c-" + secrets.token_hex(8),
            "action": {"value": button["value"], "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": sent.message_id, "open_chat_id": sent.chat_id},
        }
        return self.push("card.action.trigger", event, APP_ID)

    def push(self, kind: str, event: Any, app_id: str = APP_ID) -> Event:
        body = {
            "schema": "2.0",
            "header": {
                "event_id": secrets.token_hex(16),
                "token": "",
                "create_time": str(int(time.time() * 1000)),
                "event_type": kind,
                "tenant_key": "tenant0",
                "app_id": app_id,
            },
            "event": event,
        }
        sent = Event(secrets.token_hex(8), body)
        self.events.append(sent)
        self.deliver(sent)
        return sent

    def _frame(self, event: Event, raw: bytes | None = None) -> bytes:
        """An event's data frame (in one part: `sum` 1)."""
        payload = raw if raw is not None else json.dumps(event.body).encode()
        headers = {
            "type": "event",
            "message_id": event.frame_id,
            "sum": "1",
            "seq": "0",
            "trace_id": secrets.token_hex(8),
        }
        return encode_frame(DATA, headers, payload, next(self._seq))

    def deliver(self, event: Event, *, raw: bytes | None = None) -> None:
        """The event as a data frame to the connected client (kept until one connects)."""
        frame = self._frame(event, raw)

        async def send() -> None:
            live = [ws for ws in self.sockets if not ws.closed]
            if not live:
                self.waiting.append(event)
                return
            await live[-1].send_bytes(frame)

        self.run(send())

    def redeliver(self) -> None:
        """The last event again, as Feishu retries one."""
        self.deliver(self.events[-1])

    def answered(self, event: Event, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not event.answers:
            if time.monotonic() > deadline:
                raise TimeoutError("the event was not answered")
            time.sleep(0.02)
        return event.answers[-1]

    def wait_connected(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not any(not ws.closed for ws in self.sockets):
            if time.monotonic() > deadline:
                raise TimeoutError("no client connected")
            time.sleep(0.02)

    # -- the server ------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("app_id") != APP_ID or body.get("app_secret") != self.app_secret:
            return _error(400, 10014, "app secret invalid")
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": self.token, "expire": 7200}
        )

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("AppID") != APP_ID or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid", "data": None})
        self.endpoints += 1
        url = (
            f"{self.ws_url}/ws?device_id={secrets.token_hex(6)}&service_id={SERVICE}"
            f"&access_key={secrets.token_hex(8)}&ticket={secrets.token_hex(8)}"
        )
        config = {
            "ReconnectCount": -1,
            "ReconnectInterval": 1,
            "ReconnectNonce": 1,
            "PingInterval": 120,
        }
        return web.json_response(
            {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}}
        )

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        waiting, self.waiting = self.waiting, []
        for event in waiting:
            await ws.send_bytes(self._frame(event))
        async for message in ws:
            if message.type != WSMsgType.BINARY:
                continue
            method, headers, payload = decode_frame(message.data)
            if method == CONTROL and headers.get("type") == "ping":
                self.pings += 1
                await ws.send_bytes(encode_frame(CONTROL, {"type": "pong"}))
            elif method == DATA:
                answer = json.loads(payload)
                if answer.get("data"):
                    answer["data"] = json.loads(base64.b64decode(answer["data"]))
                for event in self.events:
                    if event.frame_id == headers.get("message_id"):
                        event.answers.append(answer)
        return ws

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The tenant token on every API call, and the rate limiter's answer when set."""
        if not request.path.startswith(("/open-apis/im/", "/open-apis/bot/")):
            return await handler(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _error(400, 99991663, "Invalid access token for authorization.")
        if self.limited > 0:
            self.limited -= 1
            return _error(
                429,
                99991400,
                "request trigger frequency limit",
                **{"x-ogw-ratelimit-limit": "5", "x-ogw-ratelimit-reset": "1"},
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def _bot(self, request: web.Request) -> web.Response:
        bot = {
            "activate_status": 2,
            "app_name": NAMES[BOT_ID],
            "avatar_url": "",
            "ip_white_list": [],
            "open_id": BOT_ID,
        }
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    async def _chat(self, request: web.Request) -> web.Response:
        chat = request.match_info["id"]
        if chat not in MODES:
            return _error(400, 232011, "chat not found")
        data = {"chat_mode": MODES[chat], "chat_type": "private", "name": chat}
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _message(
        self, chat_id: str, body: dict[str, Any], reply_to: str | None
    ) -> web.Response:
        kind = body.get("msg_type")
        try:
            content = json.loads(body.get("content", ""))
        except ValueError:
            return _error(400, 230001, "invalid message content")
        if kind not in ("text", "interactive", "image", "file", "audio", "post"):
            return _error(400, 230001, f"invalid msg_type {kind}")
        if kind == "post" and not (
            len(content) == 1 and isinstance(next(iter(content.values())).get("content"), list)
        ):
            return _error(400, 230001, "a post's content goes under a language, e.g. en_us")
        for key in [content.get("image_key"), content.get("file_key")] if kind != "post" else []:
            if key is not None and key not in self.files:
                return _error(400, 230001, f"invalid image_key or file_key {key}")
        if len(body["content"].encode()) > (30 * 1024 if kind == "interactive" else 150 * 1024):
            return _error(400, 230025, "message content is too long")
        sent = Sent(_id("om_"), chat_id, kind, content, reply_to)
        self.sent.append(sent)
        data = {
            "message_id": sent.message_id,
            "chat_id": chat_id,
            "msg_type": kind,
            "create_time": str(int(sent.at * 1000)),
            "sender": {"id": APP_ID, "id_type": "app_id", "sender_type": "app"},
            "body": {"content": body["content"]},
        }
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if request.query.get("receive_id_type") != "chat_id" or body.get("receive_id") not in MODES:
            return _error(400, 230002, "bot is not in the chat")
        return await self._message(body["receive_id"], body, None)

    async def _reply(self, request: web.Request) -> web.Response:
        body = await request.json()
        target = request.match_info["id"]
        chats = self._messages() | {s.message_id: s.chat_id for s in self.sent}
        if target not in chats:
            return _error(400, 230011, "the message was withdrawn or does not exist")
        return await self._message(chats[target], body, target)

    async def _patch(self, request: web.Request) -> web.Response:
        found = next((s for s in self.sent if s.message_id == request.match_info["id"]), None)
        if found is None:
            return _error(400, 230011, "the message was withdrawn or does not exist")
        if found.msg_type != "interactive":
            return _error(400, 230001, "only cards can be updated this way")
        body = await request.json()
        found.updates.append((time.time(), json.loads(body["content"])))
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _form(self, request: web.Request) -> dict[str, tuple[str, bytes]]:
        """A multipart form's parts: name -> (file name, bytes)."""
        parts: dict[str, tuple[str, bytes]] = {}
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            assert isinstance(part, BodyPartReader)
            parts[str(part.name)] = (part.filename or "", bytes(await part.read()))
        return parts

    async def _upload_image(self, request: web.Request) -> web.Response:
        form = await self._form(request)
        if form.get("image_type", ("", b""))[1] != b"message" or "image" not in form:
            return _error(400, 234001, "invalid request param")
        name, data = form["image"]
        if len(data) > 10 * 1024 * 1024:
            return _error(400, 234006, "the image exceeds 10 MB")
        stored = Stored(_id("img_v3_"), name or "image", data, "image/*", "image")
        self.files[stored.key] = stored
        return web.json_response({"code": 0, "msg": "success", "data": {"image_key": stored.key}})

    async def _upload_file(self, request: web.Request) -> web.Response:
        form = await self._form(request)
        if "file" not in form or not form.get("file_type", ("", b""))[1]:
            return _error(400, 234001, "invalid request param")
        name = form.get("file_name", ("", b""))[1].decode() or form["file"][0]
        kind = form["file_type"][1].decode()
        stored = Stored(_id("file_v3_"), name, form["file"][1], kind, "file")
        self.files[stored.key] = stored
        return web.json_response({"code": 0, "msg": "success", "data": {"file_key": stored.key}})

    def _messages(self) -> dict[str, str]:
        """The people's messages sent so far: id -> chat."""
        found = {}
        for event in self.events:
            said = event.body.get("event") if isinstance(event.body, dict) else None
            message = said.get("message") if isinstance(said, dict) else None
            if isinstance(message, dict) and "message_id" in message:
                found[str(message["message_id"])] = str(message.get("chat_id", ""))
        return found

    async def _react(self, request: web.Request) -> web.Response:
        body = await request.json()
        emoji = (body.get("reaction_type") or {}).get("emoji_type")
        message = request.match_info["id"]
        if message not in self._messages():
            return _error(400, 231003, "the message is not found")
        if not isinstance(emoji, str) or not emoji:
            return _error(400, 231001, "reaction type is invalid")
        self.reactions.append((message, emoji))
        data = {"reaction_id": _id("r_"), "reaction_type": {"emoji_type": emoji},
                "operator": {"operator_id": APP_ID, "operator_type": "app"},
                "action_time": str(int(time.time() * 1000))}  # fmt: skip
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        stored = self.files.get(request.match_info["key"])
        if stored is None or stored.message_id != request.match_info["id"]:
            return _error(400, 234003, "file not in message")
        if request.query.get("type") != stored.kind:
            return _error(400, 234001, "invalid request param: type")
        if stored.declared is not None:
            return await stream_unmeasured(request, stored.data, stored.mime_type, self.unmeasured)
        return web.Response(body=stored.data, content_type=stored.mime_type)
