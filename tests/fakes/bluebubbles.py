"""A fake BlueBubbles server on 127.0.0.1: the REST endpoints the iMessage adapter calls,
with the password check, an inclusive `after` filter and paging as the real server has them.

Tests `receive` messages into it and read `sent`; what the bot sends also shows up in later
queries as `isFromMe`, as it does on a real Mac.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from aiohttp import web

from tests.fakes.aio import AioServer
from tests.fakes.files import Declared, Served, stated, stream_unmeasured

PASSWORD = "bb-secret"


class FakeBlueBubbles(AioServer):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.typing: list[str] = []
        self.files: dict[str, tuple[str, str, bytes]] = {}
        """Attachments on the Mac by guid: (name, media type, bytes)."""
        self.sent_files: list[dict[str, Any]] = []
        self.declared: dict[str, int | None] = {}
        """Sizes stated for attachments (None: none) that are not theirs: served without a
        length, so only reading them tells."""
        self.unmeasured = Served()
        self.queries: list[dict[str, Any]] = []
        self.fail_queries = 0
        """Answer this many queries with 502, as a dying link would."""
        self.fail_texts = 0
        """Answer this many text sends with 502."""
        self.lock = threading.Lock()
        self._last_at = 0
        self._guids = itertools.count(1)
        self._seq = itertools.count(1)
        """Orders everything sent (texts and files alike): `_seq` in each record."""

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/api/v1/ping", self._ping)
        app.router.add_get("/api/v1/server/info", self._info)
        app.router.add_post("/api/v1/message/query", self._query)
        app.router.add_post("/api/v1/message/text", self._text)
        app.router.add_post("/api/v1/chat/{guid}/typing", self._typing)
        app.router.add_get("/api/v1/attachment/{guid}/download", self._download)
        app.router.add_post("/api/v1/message/attachment", self._attachment)

    def receive(
        self,
        text: str,
        *,
        sender: str,
        chat: str,
        at: int | None = None,
        from_me: bool = False,
        file: tuple[str, str, bytes] | None = None,
        audio_message: bool = False,
        declared: Declared = ...,
    ) -> dict[str, Any]:
        """A message on the Mac; `file` (name, media type, bytes) is attached as Messages
        attaches one: U+FFFC in the text where it sits, the file listed by guid, its
        `totalBytes` the `declared` size (left out for None)."""
        message = {
            "guid": f"msg-{next(self._guids)}",
            "text": text,
            "isFromMe": from_me,
            "isAudioMessage": audio_message,
            "dateCreated": at if at is not None else self._now(),
            "handle": None if from_me else {"address": sender},
            "chats": [{"guid": chat}],
            "attachments": [],
        }
        if file is not None:
            guid = f"att-{next(self._guids)}"
            name, media_type, data = file
            self.files[guid] = file
            if declared is not ...:
                self.declared[guid] = declared
            message["text"] = "\ufffc" + text
            listed: dict[str, Any] = {
                "guid": guid,
                "transferName": name,
                "mimeType": media_type,
                "isOutgoing": from_me,
            }
            if (size := stated(data, declared)) is not None:
                listed["totalBytes"] = size
            message["attachments"] = [listed]
        self.add(message)
        return message

    def _now(self) -> int:
        """Milliseconds, as the Mac's clock, never twice the same."""
        with self.lock:
            self._last_at = max(int(time.time() * 1000), self._last_at + 1)
            return self._last_at

    def add(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.messages.append(message)

    @staticmethod
    def _denied(request: web.Request) -> web.Response | None:
        if request.query.get("password") == PASSWORD:
            return None
        error = {"type": "Authentication Error", "message": "You are not authorized!"}
        return web.json_response(
            {"status": 401, "message": "Unauthorized", "error": error}, status=401
        )

    @staticmethod
    def _ok(data: Any, message: str = "Success") -> web.Response:
        return web.json_response({"status": 200, "message": message, "data": data})

    async def _ping(self, request: web.Request) -> web.Response:
        return self._denied(request) or self._ok("pong", "Ping received!")

    async def _info(self, request: web.Request) -> web.Response:
        info = {"os_version": "15.1", "server_version": "1.9.9", "private_api": False}
        return self._denied(request) or self._ok(info)

    async def _query(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        body = await request.json()
        with self.lock:
            self.queries.append(body)
            if self.fail_queries:
                self.fail_queries -= 1
                return web.json_response({"status": 502, "message": "Bad gateway"}, status=502)
            after = body.get("after") or 0
            found = sorted(
                (m for m in self.messages if m["dateCreated"] >= after),
                key=lambda m: m["dateCreated"],
                reverse=body.get("sort") == "DESC",
            )
        offset, limit = int(body.get("offset") or 0), int(body.get("limit") or 100)
        return self._ok(found[offset : offset + limit])

    async def _text(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        body = await request.json()
        if not body.get("chatGuid") or not body.get("tempGuid") or "message" not in body:
            error = {"type": "Validation Error", "message": "chatGuid and tempGuid are required"}
            return web.json_response({"status": 400, "error": error}, status=400)
        with self.lock:
            if self.fail_texts:
                self.fail_texts -= 1
                return web.json_response({"status": 502, "message": "Bad gateway"}, status=502)
            self.sent.append({**body, "_seq": next(self._seq)})
        echo = self.receive(body["message"], sender="", chat=body["chatGuid"], from_me=True)
        return self._ok(echo, "Message sent!")

    async def _typing(self, request: web.Request) -> web.Response:
        if denied := self._denied(request):
            return denied
        self.typing.append(request.match_info["guid"])
        return self._ok(None)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if denied := self._denied(request):
            return denied
        found = self.files.get(request.match_info["guid"])
        if found is None:
            return web.json_response({"status": 404, "message": "Attachment not found"}, status=404)
        _, media_type, data = found
        if request.match_info["guid"] in self.declared:
            return await stream_unmeasured(request, data, media_type, self.unmeasured)
        return web.Response(body=data, content_type=media_type)

    async def _attachment(self, request: web.Request) -> web.Response:
        """A file sent from the Mac: a multipart form (chatGuid, tempGuid, name, attachment)."""
        if denied := self._denied(request):
            return denied
        form = await request.post()
        upload = form.get("attachment")
        if (
            not form.get("chatGuid")
            or not form.get("tempGuid")
            or not isinstance(upload, web.FileField)
        ):
            error = {"type": "Validation Error", "message": "chatGuid and attachment are required"}
            return web.json_response({"status": 400, "error": error}, status=400)
        data = upload.file.read()
        sent = {
            "chatGuid": str(form["chatGuid"]),
            "name": str(form.get("name") or upload.filename),
            "mimeType": upload.content_type,
            "data": data,
            "method": str(form.get("method") or ""),
            "_seq": next(self._seq),
        }
        with self.lock:
            self.sent_files.append(sent)
        echo = self.receive(
            "",
            sender="",
            chat=sent["chatGuid"],
            from_me=True,
            file=(sent["name"], upload.content_type, data),
        )
        return self._ok(echo, "Attachment sent!")
