"""A fake Mattermost on 127.0.0.1, written from its API reference (v4): the REST calls a bot
makes (users/me, channels, posts and their patch, channel posts since a time, files, typing,
reactions) with bearer tokens and the documented error body, rate limiting as the server
answers it (429 with X-Ratelimit-* headers), and the websocket (/api/v4/websocket: the
authentication_challenge, then hello, then `posted` events whose post is a JSON string).
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.aio import AioServer
from tests.fakes.files import Served, stream_unmeasured

TOKEN = "mm-bot-token-0123456789"
BOT_ID = "b" * 26
OWNER_ID = "o" * 26
STRANGER_ID = "s" * 26
DM_CHANNEL = "d" * 26
STRANGER_DM = "e" * 26
TOWN_SQUARE = "t" * 26
KINDS = {DM_CHANNEL: "D", STRANGER_DM: "D", TOWN_SQUARE: "O"}
NAMES = {BOT_ID: "rousseau", OWNER_ID: "alice", STRANGER_ID: "eve"}


def _id() -> str:
    """A Mattermost id: 26 lowercase letters and digits."""
    return "".join(secrets.choice("abcdefghijkmnopqrstuwxyz0123456789") for _ in range(26))


def _error(status: int, id: str, message: str) -> web.Response:
    """An error as the server sends it (model.AppError)."""
    body = {
        "id": id,
        "message": message,
        "detailed_error": "",
        "request_id": _id(),
        "status_code": status,
    }
    return web.json_response(body, status=status)


@dataclass
class Post:
    id: str
    channel_id: str
    user_id: str
    message: str
    root_id: str = ""
    file_ids: list[str] = field(default_factory=list)
    create_at: int = field(default_factory=lambda: int(time.time() * 1000))
    type: str = ""
    props: dict[str, Any] = field(default_factory=dict)
    edits: list[tuple[float, str]] = field(default_factory=list)
    """(when, what) of each patch."""
    at: float = field(default_factory=time.time)

    @property
    def shown(self) -> str:
        return self.edits[-1][1] if self.edits else self.message


@dataclass
class Stored:
    id: str
    name: str
    data: bytes
    mime_type: str
    channel_id: str
    declared: int | None = None
    """A size stated other than the true one: the body then goes without a length."""


class FakeMattermost(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.token = TOKEN
        self.posts: list[Post] = []
        """Every post, the people's and the bot's, in order."""
        self.files: dict[str, Stored] = {}
        self.typing: list[tuple[str, str]] = []
        self.reactions: list[tuple[str, str, str]] = []
        """(user, post, emoji name)."""
        self.limited = 0
        """How many of the next calls to answer 429."""
        self.authenticated = 0
        self.unmeasured = Served()
        self._seq = itertools.count(1)
        self._last_event: dict[str, Any] | None = None

    def routes(self, app: web.Application) -> None:
        app.middlewares.append(self._guard)
        api = "/api/v4"
        app.router.add_get(f"{api}/websocket", self._websocket)
        app.router.add_get(f"{api}/users/me", self._me)
        app.router.add_post(f"{api}/users/me/typing", self._typing)
        app.router.add_get(f"{api}/channels/{{id}}", self._channel)
        app.router.add_get(f"{api}/channels/{{id}}/posts", self._channel_posts)
        app.router.add_post(f"{api}/posts", self._create_post)
        app.router.add_put(f"{api}/posts/{{id}}/patch", self._patch)
        app.router.add_post(f"{api}/files", self._upload)
        app.router.add_get(f"{api}/files/{{id}}", self._file)
        app.router.add_post(f"{api}/reactions", self._react)
        app.router.add_route("*", f"{api}/{{path:.*}}", self._unknown)

    # -- what people do ------------------------------------------------------------------

    def say(
        self,
        user_id: str,
        channel_id: str,
        message: str,
        *,
        root_id: str = "",
        mentions: list[str] | None = None,
        files: list[tuple[str, bytes, str]] = (),  # type: ignore[assignment]
        voice: bool = False,
        declared: int | None = None,
        live: bool = True,
    ) -> Post:
        """A post by `user_id`, sent to the bot's websocket as the server sends it (`voice`:
        recorded in the app as a voice message, a post of type "voice"; not `live`: made
        while the bot is away, kept for it to fetch)."""
        stored = [self._store(name, data, mime, channel_id) for name, data, mime in files]
        for one in stored:
            one.declared = declared
        post = Post(_id(), channel_id, user_id, message, root_id, [f.id for f in stored])
        post.type = "voice" if voice else ""
        self.posts.append(post)
        data: dict[str, Any] = {
            "channel_display_name": "",
            "channel_name": channel_id,
            "channel_type": KINDS.get(channel_id, "O"),
            "post": json.dumps(self._post(post)),
            "sender_name": f"@{NAMES.get(user_id, 'someone')}",
            "team_id": "" if KINDS.get(channel_id) == "D" else "team0000000000000000000000",
        }
        if mentions:
            data["mentions"] = json.dumps(mentions)
        if live:
            self.event("posted", data, channel_id)
        return post

    def event(self, name: str, data: dict[str, Any], channel_id: str = "") -> None:
        frame = {
            "event": name,
            "data": data,
            "broadcast": {
                "omit_users": None,
                "user_id": "",
                "channel_id": channel_id,
                "team_id": "",
            },
            "seq": next(self._seq),
        }
        self._last_event = frame
        self.send_raw(json.dumps(frame))

    def redeliver(self) -> None:
        """The last event sent again (as after a reconnect the server may)."""
        assert self._last_event is not None
        self.send_raw(json.dumps(self._last_event))

    def send_raw(self, frame: str) -> None:
        self.wait_ready()

        async def send() -> None:
            for ws in list(self.sockets):
                if not ws.closed:
                    await ws.send_str(frame)

        self.run(send())

    def wait_ready(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(not ws.closed for ws in self.sockets):
            if time.monotonic() > deadline:
                raise TimeoutError("no websocket connected")
            time.sleep(0.02)

    def press(self, post: Post, label: str, user_id: str = OWNER_ID) -> int:
        """`user_id` presses the button `label` of `post`: Mattermost posts the button's
        context to its integration's address, as the interactive messages docs say."""
        from tests.fakes.aio import post_signed

        actions = [a for one in post.props.get("attachments", []) for a in one.get("actions", [])]
        [action] = [a for a in actions if a["name"] == label]
        press = {
            "user_id": user_id,
            "user_name": NAMES.get(user_id, "someone"),
            "channel_id": post.channel_id,
            "team_id": "",
            "post_id": post.id,
            "trigger_id": _id(),
            "type": "",
            "data_source": "",
            "context": action["integration"].get("context", {}),
        }
        return post_signed(action["integration"]["url"], press, "")

    def bot_posts(self) -> list[Post]:
        return [p for p in self.posts if p.user_id == BOT_ID]

    # -- the server ------------------------------------------------------------------------

    def _store(self, name: str, data: bytes, mime: str, channel_id: str) -> Stored:
        stored = Stored(_id(), name, data, mime, channel_id)
        self.files[stored.id] = stored
        return stored

    def _info(self, stored: Stored) -> dict[str, Any]:
        return {
            "id": stored.id,
            "user_id": "",
            "post_id": "",
            "name": stored.name,
            "extension": stored.name.rpartition(".")[2],
            "size": len(stored.data) if stored.declared is None else stored.declared,
            "mime_type": stored.mime_type,
            "create_at": int(time.time() * 1000),
        }

    def _post(self, post: Post) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": post.id,
            "create_at": post.create_at,
            "update_at": post.create_at,
            "edit_at": 0,
            "delete_at": 0,
            "is_pinned": False,
            "user_id": post.user_id,
            "channel_id": post.channel_id,
            "root_id": post.root_id,
            "original_id": "",
            "message": post.shown,
            "type": post.type,
            "props": post.props,
            "hashtags": "",
            "file_ids": post.file_ids,
            "pending_post_id": "",
            "metadata": {},
        }
        if post.file_ids:
            body["metadata"]["files"] = [self._info(self.files[i]) for i in post.file_ids]
        return body

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for frame in ws:
            if frame.type != WSMsgType.TEXT:
                break
            said = json.loads(frame.data)
            if said.get("action") != "authentication_challenge":
                continue
            if (said.get("data") or {}).get("token") != self.token:
                await ws.send_json(
                    {
                        "status": "FAIL",
                        "seq_reply": said.get("seq"),
                        "error": {"id": "api.web_socket_router.not_authenticated.app_error"},
                    }
                )
                await ws.close()
                return ws
            self.authenticated += 1
            await ws.send_json({"status": "OK", "seq_reply": said.get("seq")})
            hello = {"server_version": "9.11.0", "connection_id": _id()}
            await ws.send_json({"event": "hello", "data": hello, "broadcast": {}, "seq": 0})
            self.sockets.append(ws)
        return ws

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The bearer token on every REST call, and the rate limiter's 429 when set."""
        if request.path == "/api/v4/websocket":
            return await handler(request)  # its token comes in the challenge
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _error(
                401,
                "api.context.session_expired.app_error",
                "Invalid or expired session, please login again.",
            )
        if self.limited > 0:
            self.limited -= 1
            return web.Response(
                status=429,
                text="limit exceeded\n",
                headers={
                    "X-Ratelimit-Limit": "10",
                    "X-Ratelimit-Remaining": "0",
                    "X-Ratelimit-Reset": "1",
                    "Retry-After": "1",
                },
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def _me(self, request: web.Request) -> web.Response:
        return web.json_response({"id": BOT_ID, "username": NAMES[BOT_ID], "is_bot": True})

    async def _channel(self, request: web.Request) -> web.Response:
        channel = request.match_info["id"]
        if channel not in KINDS:
            return _error(404, "app.channel.get.existing.app_error", "Unable to find")
        return web.json_response({"id": channel, "type": KINDS[channel], "name": channel})

    async def _channel_posts(self, request: web.Request) -> web.Response:
        channel, since = request.match_info["id"], int(request.query.get("since", "0"))
        found = [p for p in self.posts if p.channel_id == channel and p.create_at > since]
        return web.json_response(
            {
                "order": [p.id for p in reversed(found)],
                "posts": {p.id: self._post(p) for p in found},
            }
        )

    async def _create_post(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not body.get("channel_id") or body["channel_id"] not in KINDS:
            return _error(400, "api.context.invalid_body_param.app_error", "Invalid post")
        if len(body.get("message", "")) > 16383:
            return _error(400, "model.post.is_valid.msg.app_error", "Invalid message")
        post = Post(
            _id(),
            body["channel_id"],
            BOT_ID,
            body.get("message", ""),
            body.get("root_id", ""),
            list(body.get("file_ids") or []),
            props=body.get("props") or {},
        )
        self.posts.append(post)
        return web.json_response(self._post(post), status=201)

    async def _patch(self, request: web.Request) -> web.Response:
        found = next((p for p in self.posts if p.id == request.match_info["id"]), None)
        if found is None:
            return _error(404, "app.post.get.app_error", "Unable to get the post.")
        body = await request.json()
        found.edits.append((time.time(), body["message"]))
        return web.json_response(self._post(found))

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["files"]
        assert isinstance(upload, web.FileField)
        stored = self._store(
            upload.filename, upload.file.read(), upload.content_type, str(form["channel_id"])
        )
        return web.json_response({"file_infos": [self._info(stored)], "client_ids": []}, status=201)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        stored = self.files.get(request.match_info["id"])
        if stored is None:
            return _error(404, "app.file_info.get.app_error", "Unable to get the file info.")
        if stored.declared is not None:
            return await stream_unmeasured(request, stored.data, stored.mime_type, self.unmeasured)
        return web.Response(body=stored.data, content_type=stored.mime_type)

    async def _typing(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.typing.append((body["channel_id"], body.get("parent_id", "")))
        return web.json_response({"status": "OK"})

    async def _react(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.reactions.append((body["user_id"], body["post_id"], body["emoji_name"]))
        return web.json_response({**body, "create_at": int(time.time() * 1000)}, status=201)

    async def _unknown(self, request: web.Request) -> web.Response:
        return _error(404, "api.context.404.app_error", "Sorry, we could not find the page.")
