"""A fake Slack on 127.0.0.1: the Web API methods a Socket Mode bot uses (auth.test,
apps.connections.open, chat.postMessage) and the Socket Mode websocket itself (hello,
events_api envelopes, acks, disconnect). Runs its own event loop in a thread so tests can
drive it with plain calls.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
from aiohttp import WSMsgType, web

from tests.fakes.aio import AioServer
from tests.fakes.files import Declared, Served, stated, stream_unmeasured

BOT_USER = "UBOT0001"
BOT_ID = "BBOT0001"
TEAM = "T0000001"
REDELIVER = 3.0
"""Seconds before an unacknowledged event is sent again (when events are spread)."""


@dataclass
class Uploaded:
    """A file the bot shared: uploaded to its upload URL, then completed into a channel."""

    channel: str
    name: str
    data: bytes
    comment: str
    thread_ts: str | None


@dataclass
class Posted:
    channel: str
    text: str
    thread_ts: str | None
    blocks: list[dict[str, Any]] | None = None
    at: float = field(default_factory=time.time)
    ts: str = ""
    shown: str = ""
    """What the channel shows now: the text as posted, or as last updated."""
    updated_at: list[float] = field(default_factory=list)
    streaming: bool = False
    """Started by chat.startStream and not yet stopped."""


class FakeSlack(AioServer):
    def __init__(self, app_token: str = "xapp-1-test", bot_token: str = "xoxb-test") -> None:
        super().__init__()
        self.app_token = app_token
        self.bot_token = bot_token
        self.posted: list[Posted] = []
        self.acked: list[str] = []
        self.spread = False
        """As Slack does with several connections of one app: each event goes to the next
        open one, and an event not acknowledged within REDELIVER seconds is sent again
        (retry_attempt + 1) on another."""
        self._turn = itertools.count()
        self.connections = 0
        self.auth_error = "invalid_auth"
        """What the Web API answers a token it does not know (Slack has several answers)."""
        self._ids = itertools.count(1)
        self._ts = itertools.count(1)
        self.files: dict[str, bytes] = {}
        """Shared files' bytes, by file id."""
        self.downloads: list[str] = []
        self.declared: dict[str, int | None] = {}
        """Sizes stated for files (None: none) that are not theirs: served without a
        length, so only reading them tells."""
        self.unmeasured = Served()
        self.rate_limit_updates = 0
        self.down = False
        """Slack unreachable: every call answered 503 (as an outage answers)."""
        """Answer this many chat.update calls with 429 (Retry-After: 2)."""
        self.streams_refused = ""
        """Set: chat.startStream answers this error (a workspace without AI streaming)."""
        self.reactions: list[tuple[str, str, str]] = []
        """reactions.add calls: (channel, ts, name)."""
        self.stream_calls: list[tuple[str, str]] = []
        """(method, ts) of every chat.*Stream call, in order."""
        self.uploading: dict[str, dict[str, Any]] = {}
        """Files the bot asked to upload, by file id: their name, length and bytes once sent."""
        self.uploaded: list[Uploaded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        app.router.add_get("/files-pri/{id}/{name}", self._file)
        app.router.add_post("/upload/v1/{id}", self._upload)

    # -- what tests do --------------------------------------------------------------------

    def message(
        self,
        text: str,
        *,
        user: str = "U0OWNER",
        channel: str = "D0DM",
        thread_ts: str | None = None,
        bot: bool = False,
        subtype: str | None = None,
        files: list[tuple[str, bytes, str]] | None = None,
        declared: Declared = ...,
    ) -> dict[str, Any]:
        """A `message` event as Slack sends it; returns the event (to send it again).
        `files` = [(name, bytes, mimetype)] are shared with it (subtype file_share), served
        at their `url_private` to the bot token only, each of the `declared` size (no
        `size` for None)."""
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": BOT_USER if bot else user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im" if channel.startswith("D") else "channel",
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if bot:
            event["bot_id"] = BOT_ID
        if subtype:
            event["subtype"] = subtype
        if files:
            event["subtype"] = "file_share"
            event["files"] = [self._shared(*f, declared=declared) for f in files]
        self.send_event(event)
        return event

    def _shared(
        self, name: str, data: bytes, mimetype: str, *, declared: Declared = ...
    ) -> dict[str, Any]:
        file_id = f"F{next(self._ids):08d}"
        self.files[file_id] = data
        if declared is not ...:
            self.declared[file_id] = declared
        url = f"{self.url}/files-pri/{TEAM}-{file_id}/{name}"
        shared: dict[str, Any] = {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "url_private": url,
            "url_private_download": url + "?download=1",
        }
        if (size := stated(data, declared)) is not None:
            shared["size"] = size
        return shared

    async def _file(self, request: web.Request) -> web.StreamResponse:
        """url_private: the bytes to the bot token; anyone else gets the sign-in page."""
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        file_id = request.match_info["id"].rsplit("-", 1)[-1]
        data = self.files.get(file_id)
        if data is None:
            return web.Response(status=404)
        self.downloads.append(file_id)
        if file_id in self.declared:
            return await stream_unmeasured(
                request, data, "application/octet-stream", self.unmeasured
            )
        return web.Response(body=data, content_type="application/octet-stream")

    def mention(
        self, text: str, *, user: str = "U0OWNER", channel: str = "C0GENERAL"
    ) -> dict[str, Any]:
        """What Slack sends for a channel message naming the bot: a message and an app_mention."""
        event = self.message(f"<@{BOT_USER}> {text}", user=user, channel=channel)
        mention = dict(event, type="app_mention")
        mention.pop("channel_type")
        self.send_event(mention)
        return event

    def send_event(
        self, event: dict[str, Any], *, retry: int = 0, event_id: str | None = None
    ) -> str:
        envelope_id = f"env-{next(self._ids)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry,
            "retry_reason": "timeout" if retry else "",
            "payload": {
                "token": "verification-token",
                "team_id": TEAM,
                "api_app_id": "A0001",
                "event": event,
                "type": "event_callback",
                "event_id": event_id or f"Ev{next(self._ids):08d}",
                "event_time": int(time.time()),
                "authorizations": [
                    {
                        "team_id": TEAM,
                        "user_id": BOT_USER,
                        "is_bot": True,
                        "is_enterprise_install": False,
                    }
                ],
            },
        }
        if not self.spread:
            self._send(envelope)
            return envelope_id
        self.wait_connections(1)
        self.run(self._spread(envelope))
        return envelope_id

    async def _spread(self, envelope: dict[str, Any]) -> None:
        while not self.sockets:  # every connection is down: Slack keeps the event
            await anyio.sleep(0.1)
        socket = self.sockets[next(self._turn) % len(self.sockets)]
        try:
            await socket.send_str(json.dumps(envelope))
        except ConnectionError:
            pass  # not acknowledged: sent again below
        asyncio.get_running_loop().call_later(REDELIVER, self._unacked, envelope)

    def _unacked(self, envelope: dict[str, Any]) -> None:
        if envelope["envelope_id"] in self.acked:
            return
        again = {**envelope, "retry_attempt": envelope["retry_attempt"] + 1}
        again["retry_reason"] = "timeout"
        asyncio.get_running_loop().create_task(self._spread(again))

    def press(self, posted: Posted, label: str, *, user: str) -> str:
        """Press a button under a message the bot posted (a block_actions interaction)."""
        button = next(
            element
            for block in posted.blocks or []
            if block["type"] == "actions"
            for element in block["elements"]
            if element["text"]["text"] == label
        )
        envelope_id = f"env-{next(self._ids)}"
        now = f"{time.time():.6f}"
        self._send(
            {
                "envelope_id": envelope_id,
                "type": "interactive",
                "accepts_response_payload": True,
                "payload": {
                    "type": "block_actions",
                    "token": "verification-token",
                    "api_app_id": "A0001",
                    "trigger_id": f"trig-{next(self._ids)}",
                    "team": {"id": TEAM, "domain": "test"},
                    "user": {"id": user, "username": "user", "team_id": TEAM},
                    "channel": {"id": posted.channel, "name": "chat"},
                    "container": {
                        "type": "message",
                        "message_ts": now,
                        "channel_id": posted.channel,
                        "is_ephemeral": False,
                        **({"thread_ts": posted.thread_ts} if posted.thread_ts else {}),
                    },
                    "message": {"type": "message", "text": posted.text, "ts": now},
                    "actions": [
                        {
                            "type": "button",
                            "action_id": button["action_id"],
                            "block_id": "b1",
                            "text": button["text"],
                            "value": button["value"],
                            "action_ts": now,
                        }
                    ],
                },
            }
        )
        return envelope_id

    def disconnect(self) -> None:
        """Slack's request to reconnect (it does this every few hours)."""
        self._send(
            {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake"}}
        )

    def wait_connections(self, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.connections < count or not self.sockets:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} socket connections, saw {self.connections}")
            time.sleep(0.02)

    # -- the wire -------------------------------------------------------------------------

    def _send(self, frame: dict[str, Any]) -> None:
        self.wait_connections(1)

        self.run(self.sockets[-1].send_str(json.dumps(frame)))

    def go_down(self) -> None:
        """An outage: the socket dropped, and every call answered 503 until `down` is off."""
        self.down = True
        self.drop()

    async def _api(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503, text="service unavailable")
        method = request.match_info["method"]
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        raw = await request.read()
        if request.content_type == "application/json":
            params = json.loads(raw or b"{}")
        else:
            params = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            params.update(request.query)  # the SDK sends some methods' arguments in the URL
            token = token or params.get("token", "")
        if method == "apps.connections.open":
            if token != self.app_token:
                return web.json_response({"ok": False, "error": self.auth_error})
            return web.json_response(
                {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link?ticket=t"}
            )
        if token != self.bot_token:
            return web.json_response({"ok": False, "error": self.auth_error})
        if method == "auth.test":
            return web.json_response(
                {
                    "ok": True,
                    "user_id": BOT_USER,
                    "bot_id": BOT_ID,
                    "team_id": TEAM,
                    "user": "rousseau",
                    "team": "Test",
                    "url": "https://test.slack.example/",
                }
            )
        answer = getattr(self, "_m_" + method.replace(".", "_"), None)
        if answer is not None:
            return answer(params)  # type: ignore[no-any-return]
        return web.json_response({"ok": True})

    def _m_chat_postMessage(self, params: dict[str, Any]) -> web.Response:
        blocks = params.get("blocks")
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        self.posted.append(
            Posted(
                channel=params["channel"],
                text=params["text"],
                thread_ts=params.get("thread_ts"),
                blocks=json.loads(blocks) if isinstance(blocks, str) else blocks,
                ts=ts,
                shown=params["text"],
            )
        )
        return web.json_response({"ok": True, "channel": params["channel"], "ts": ts})

    def _m_chat_update(self, params: dict[str, Any]) -> web.Response:
        if self.rate_limit_updates:
            self.rate_limit_updates -= 1
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "2"}
            )
        found = next(
            (p for p in self.posted if (p.channel, p.ts) == (params["channel"], params["ts"])),
            None,
        )
        if found is None:
            return web.json_response({"ok": False, "error": "message_not_found"})
        found.shown = params["text"]
        found.updated_at.append(time.time())
        return web.json_response(
            {"ok": True, "channel": found.channel, "ts": found.ts, "text": found.shown}
        )

    def _m_chat_startStream(self, params: dict[str, Any]) -> web.Response:
        if self.streams_refused:
            return web.json_response({"ok": False, "error": self.streams_refused})
        if not params.get("thread_ts"):
            return web.json_response({"ok": False, "error": "invalid_arguments"})
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        text = params.get("markdown_text", "")
        self.posted.append(
            Posted(
                channel=params["channel"],
                text=text,
                thread_ts=params["thread_ts"],
                ts=ts,
                shown=text,
                streaming=True,
            )
        )
        self.stream_calls.append(("chat.startStream", ts))
        return web.json_response({"ok": True, "channel": params["channel"], "ts": ts})

    def _streamed(self, params: dict[str, Any], method: str) -> Posted | web.Response:
        found = next(
            (p for p in self.posted if (p.channel, p.ts) == (params["channel"], params["ts"])),
            None,
        )
        if found is None or not found.streaming:
            return web.json_response({"ok": False, "error": "message_not_in_streaming_state"})
        self.stream_calls.append((method, found.ts))
        found.shown += params.get("markdown_text", "")
        found.updated_at.append(time.time())
        return found

    def _m_chat_appendStream(self, params: dict[str, Any]) -> web.Response:
        found = self._streamed(params, "chat.appendStream")
        if isinstance(found, web.Response):
            return found
        return web.json_response({"ok": True, "channel": found.channel, "ts": found.ts})

    def _m_chat_stopStream(self, params: dict[str, Any]) -> web.Response:
        found = self._streamed(params, "chat.stopStream")
        if isinstance(found, web.Response):
            return found
        found.streaming = False
        return web.json_response({"ok": True, "channel": found.channel, "ts": found.ts})

    def _m_reactions_add(self, params: dict[str, Any]) -> web.Response:
        self.reactions.append((params["channel"], params["timestamp"], params["name"]))
        return web.json_response({"ok": True})

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> web.Response:
        file_id = f"FUP{next(self._ids)}"
        self.uploading[file_id] = {
            "name": params["filename"],
            "length": int(params["length"]),
            "data": None,
        }
        upload_url = f"{self.url}/upload/v1/{file_id}"
        return web.json_response({"ok": True, "upload_url": upload_url, "file_id": file_id})

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> web.Response:
        raw_files = params["files"]
        shared = json.loads(raw_files) if isinstance(raw_files, str) else raw_files
        for f in shared:
            pending = self.uploading.pop(f["id"], None)
            if pending is None or pending["data"] is None:
                return web.json_response({"ok": False, "error": "file_not_found"})
            self.uploaded.append(
                Uploaded(
                    channel=params["channel_id"],
                    name=pending["name"],
                    data=pending["data"],
                    comment=params.get("initial_comment") or "",
                    thread_ts=params.get("thread_ts"),
                )
            )
        return web.json_response({"ok": True, "files": [{"id": f["id"]} for f in shared]})

    async def _upload(self, request: web.Request) -> web.Response:
        """The upload URL: the file's bytes, as many as getUploadURLExternal was told."""
        pending = self.uploading.get(request.match_info["id"])
        data = await request.read()
        if pending is None or len(data) != pending["length"]:
            return web.Response(status=400, text="bad upload")
        pending["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self.sockets.append(ws)
        await ws.send_str(
            json.dumps({"type": "hello", "num_connections": 1, "debug_info": {"host": "fake"}})
        )
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    if "envelope_id" in data:
                        self.acked.append(data["envelope_id"])
        finally:
            self.sockets.remove(ws)
        return ws
