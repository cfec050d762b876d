"""A fake Telegram Bot API on 127.0.0.1: getMe, getUpdates (long polling), sendMessage,
sendChatAction and deleteWebhook, as python-telegram-bot calls them over HTTP.

Tests push updates in and read what the bot sent; `flood_once` makes the next sendMessage
answer 429 with retry_after, as Telegram's flood control does. Pushed text carries the entities
Telegram would mark in it (@mentions and /commands), counted in UTF-16 code units as Telegram
counts them.
"""

from __future__ import annotations

import email.policy
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from tests.fakes import HTTPServer
from tests.fakes.files import Declared, Served, send_unmeasured, stated

BOT_ID = 777000111
BOT_USERNAME = "rousseau_test_bot"
_MARKED = re.compile(
    r"(?<![\w/@])(?:(?P<bot_command>/\w{1,32}(?:@\w{5,32})?)|(?P<mention>@\w{5,32}))(?!\w)",
    re.ASCII,
)


def _units(text: str) -> int:
    """Length in UTF-16 code units: Telegram's measure for entity offsets and lengths."""
    return len(text.encode("utf-16-le")) // 2


def entities(text: str) -> list[dict[str, Any]]:
    """The mention and bot_command entities Telegram marks in `text`, wherever they stand."""
    return [
        {"type": m.lastgroup, "offset": _units(text[: m.start()]), "length": _units(m.group())}
        for m in _MARKED.finditer(text)
    ]


@dataclass
class Sent:
    chat_id: int
    text: str
    params: dict[str, Any]
    at: float = field(default_factory=time.time)
    message_id: int = 0
    shown: str = ""
    """What the chat shows now: the text as sent, or as last edited."""


@dataclass
class Edit:
    chat_id: int
    message_id: int
    text: str
    at: float = field(default_factory=time.time)
    can_stop: bool = False
    """A draft shown with the app's stop button."""


PHOTO = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF" + bytes(range(256)) + b"\xff\xd9"
"""The bytes of the photo a `caption=True` push carries (a JPEG's markers around filler)."""


class FakeTelegram:
    def __init__(self, token: str = "123456:TEST-token") -> None:
        self.token = token
        self.updates: list[dict[str, Any]] = []
        self.sent: list[Sent] = []
        self.edits: list[Edit] = []
        self.reactions: list[tuple[int, int, str]] = []
        """setMessageReaction calls: (chat, message, emoji)."""
        self.drafts: list[Edit] = []
        """sendMessageDraft calls: the draft id in `message_id`."""
        self.flood_edits_once: int | None = None
        """Answer the next editMessageText with 429 and this retry_after."""
        self.actions: list[tuple[int, str]] = []
        self.offsets: list[int] = []
        self.answered: list[str] = []
        """Callback queries the bot answered (pressed buttons)."""
        self.flood_once: int | None = None
        self.flood_chats: dict[int, float] = {}
        """Chats whose sendMessage answers 429 (retry_after = the value) until that time
        has passed, as Telegram's per-chat flood control does."""
        self.flood_until: dict[int, float] = {}
        self.drop_polls = 0
        """Answer this many getUpdates calls with 502, as a proxy in front of a dying link."""
        self.calls: list[str] = []
        self.first_called: dict[str, float] = {}
        """When each method was first called (time.monotonic()), to time a start-up."""
        self.on_sent: Callable[[Sent], None] | None = None
        """Called with each message the bot sends once it is recorded, in the server's thread."""
        self.call_counts: Counter[str] = Counter()
        self.pushed_at: dict[str, float] = {}
        self.files: dict[str, bytes] = {"photo-1": PHOTO}
        """What getFile and the file download path serve, by file id."""
        self.downloads: list[str] = []
        """File ids downloaded, in order."""
        self.declared: dict[str, int | None] = {}
        """Sizes stated for files (None: none) that are not theirs: served without a
        length, so only reading them tells."""
        self.unmeasured = Served()
        self.uploads_down = False
        """Answer sendPhoto and sendDocument with 502, as a failing upload path does."""
        self.webhook: dict[str, Any] | None = None
        """What setWebhook set (url, secret_token): updates are then posted, not polled."""
        self.balance: list[str] = []
        """With a webhook: the daemons' own addresses, posted to in turn as a load balancer
        in front of them would (a refused or failed post goes to the next)."""
        self.posted_to: list[str] = []
        """Where each update was taken (a 200), in order."""
        self._turn = itertools.count()
        self._posting = False
        self._cond = threading.Condition()
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake._handle(self, raw)

            do_GET = do_POST

        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # Clients drop pooled connections and cancel calls mid-request; that is not an error.
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeTelegram:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- what tests do ---------------------------------------------------------------------

    def push(self, text: str, **made: Any) -> dict[str, Any]:
        """Queue an update as Telegram would deliver it (see `update`); returns it (push it
        again to double)."""
        update = self.update(text, **made)
        self.deliver(update)
        return update

    def _attach(
        self, message: dict[str, Any], attach: tuple[str, bytes, str, str], declared: Declared
    ) -> None:
        """The file `attach` describes, as the message carries it (see `update`)."""
        kind, data, name, media_type = attach
        file_id = f"{kind}-{len(self.files) + 1}"
        self.files[file_id] = data
        described: dict[str, Any] = {"file_id": file_id, "file_unique_id": "u" + file_id}
        if declared is not ...:
            self.declared[file_id] = declared
        if (size := stated(data, declared)) is not None:
            described["file_size"] = size
        if kind == "photo":
            message["photo"] = [
                {**described, "file_id": file_id + "-small", "width": 90, "height": 60},
                {**described, "width": 1280, "height": 960},
            ]
        elif kind == "voice":
            message["voice"] = {**described, "duration": 3, "mime_type": media_type}
        else:
            message[kind] = {**described, "file_name": name, "mime_type": media_type}

    def update(
        self,
        text: str,
        *,
        chat_id: int = 42,
        user_id: int = 42,
        chat_type: str = "private",
        mention: bool = False,
        prefix: str = "",
        caption: bool = False,
        reply_to_bot: bool = False,
        from_bot: bool = False,
        update_id: int | None = None,
        message_id: int | None = None,
        attach: tuple[str, bytes, str, str] | None = None,
        declared: Declared = ...,
    ) -> dict[str, Any]:
        """An update as Telegram would deliver it, not queued (a test may spoil it first).

        `mention` names the bot before `text`, after `prefix`; `caption` sends a photo with the
        text as its caption. `attach` = (photo | document | voice | audio, bytes, file name,
        media type) sends that file, `text` (if any) as its caption; getFile serves it, its
        `file_size` the `declared` one (left out for None).
        """
        if mention:
            text = f"@{BOT_USERNAME} {text}"
        text = prefix + text
        message: dict[str, Any] = {
            "message_id": message_id or next(self._message_ids),
            "date": int(time.time()),
            "chat": {
                "id": chat_id,
                "type": chat_type,
                **({"title": "Group"} if chat_type != "private" else {"first_name": "Ann"}),
            },
            "from": {"id": user_id, "is_bot": from_bot, "first_name": f"User{user_id}"},
        }
        marked = entities(text)
        if attach is not None:
            self._attach(message, attach, declared)
            if text:
                message["caption"] = text
                if marked:
                    message["caption_entities"] = marked
        elif caption:
            message["photo"] = [
                {"file_id": "photo-1", "file_unique_id": "p1", "width": 90, "height": 60}
            ]
            message["caption"] = text
            if marked:
                message["caption_entities"] = marked
        else:
            message["text"] = text
            if marked:
                message["entities"] = marked
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "date": int(time.time()),
                "chat": message["chat"],
                "from": {
                    "id": BOT_ID,
                    "is_bot": True,
                    "first_name": "Rousseau",
                    "username": BOT_USERNAME,
                },
                "text": "earlier answer",
            }
        return {"update_id": update_id or next(self._update_ids), "message": message}

    def press(self, sent: Sent, label: str, *, user_id: int = 42) -> dict[str, Any]:
        """Press one of the inline buttons under a message the bot sent."""
        markup = sent.params.get("reply_markup") or {}
        data = next(
            b["callback_data"]
            for row in markup.get("inline_keyboard", [])
            for b in row
            if b["text"] == label
        )
        chat_type = "private" if sent.chat_id > 0 else "supergroup"
        query = {
            "id": str(next(self._update_ids)),
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            "chat_instance": "1",
            "data": data,
            "message": {
                "message_id": sent.params.get("_message_id", 1),
                "date": int(time.time()),
                "chat": {"id": sent.chat_id, "type": chat_type, "first_name": "Ann"},
                "text": sent.text,
            },
        }
        update = {"update_id": next(self._update_ids), "callback_query": query}
        self.deliver(update)
        return update

    def stop_draft(self, draft: Edit) -> dict[str, Any]:
        """The user presses a draft's stop button (Bot API 10.3)."""
        update = {
            "update_id": next(self._update_ids),
            "stopped_message_generation": {
                "chat": {"id": draft.chat_id, "type": "private", "first_name": "Ann"},
                "draft_id": draft.message_id,
            },
        }
        self.deliver(update)
        return update

    def deliver(self, update: dict[str, Any]) -> None:
        with self._cond:
            self.updates.append(update)
            self._cond.notify_all()
            self._start_posting()

    def _start_posting(self) -> None:
        """(Holding the lock.) One thread posts, while there is a webhook and updates."""
        if self.webhook is not None and self.updates and not self._posting:
            self._posting = True
            threading.Thread(target=self._post_updates, daemon=True).start()

    def _post_updates(self) -> None:
        """Post the queued updates one at a time, as Telegram does to a webhook: each until
        it is taken (a 200), then the next."""
        while True:
            with self._cond:
                if not self.updates or self.webhook is None:
                    self._posting = False
                    return
                update = self.updates[0]
            targets = self.balance or [self.webhook["url"]]
            target = targets[next(self._turn) % len(targets)]
            request = urllib.request.Request(
                target,
                data=json.dumps(update).encode(),
                headers={
                    "content-type": "application/json",
                    "X-Telegram-Bot-Api-Secret-Token": self.webhook.get("secret_token") or "",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    taken = answer.status == 200
            except (OSError, urllib.error.HTTPError):
                taken = False
            if not taken:
                time.sleep(0.1)
                continue
            with self._cond:
                self.posted_to.append(target)
                self.updates.remove(update)

    def _api_setWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            self.webhook = {"url": params["url"], "secret_token": params.get("secret_token")}
            self._start_posting()
        return 200, {"ok": True, "result": True}

    def _api_deleteWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.webhook = None
        return 200, {"ok": True, "result": True}

    def wait_sent(self, count: int, timeout: float = 20.0) -> list[Sent]:
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"expected {count} messages, got {[s.text for s in self.sent]}"
                )
            time.sleep(0.02)
        return list(self.sent)

    # -- the Bot API ----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        path = handler.path.split("?")[0]
        if path.startswith("/control/"):
            self._control(handler, path, raw)
            return
        if path.startswith(f"/file/bot{self.token}/files/"):
            self._download(handler, path.rsplit("/", 1)[-1])
            return
        prefix = f"/bot{self.token}/"
        method = path.rsplit("/", 1)[-1]
        self.calls.append(method)
        self.first_called.setdefault(method, time.monotonic())
        self.call_counts[method] += 1
        if not path.startswith(prefix):
            self._reply(
                handler, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
            return
        params = self._params(handler, raw)
        answer = getattr(self, f"_api_{method}", None)
        if answer is None:
            self._reply(handler, 200, {"ok": True, "result": True})
            return
        status, result = answer(params)
        self._reply(handler, status, result)

    def _control(self, handler: BaseHTTPRequestHandler, path: str, raw: bytes) -> None:
        """For load runs in another process: push many messages, read what came back.

        /control/stats is polled often during a run, so it answers in constant time; the
        latencies (one per reply, from `since` on) are a separate, larger read.
        """
        if path == "/control/push":
            now = time.time()
            for m in json.loads(raw)["messages"]:
                self._push_timed(m, now)
            self._reply(handler, 200, {"ok": True})
            return
        if path == "/control/pace":  # the messages one by one, `every` seconds apart
            body = json.loads(raw)
            threading.Thread(
                target=self._pace, args=(body["messages"], float(body["every"])), daemon=True
            ).start()
            self._reply(handler, 200, {"ok": True})
            return
        if path == "/control/latencies":
            since = int(parse_qs(handler.path.partition("?")[2]).get("since", ["0"])[0])
            latencies = [
                (s.at - self.pushed_at[s.text[6:]]) * 1000
                for s in self.sent[since:]
                if s.text.startswith("echo: ") and s.text[6:] in self.pushed_at
            ]
            self._reply(handler, 200, {"latencies_ms": latencies})
            return
        finished = sum(1 for s in self.sent if not s.shown.endswith("…"))  # not a preview
        stats = {"sent": len(self.sent), "finished": finished, "calls": dict(self.call_counts)}
        self._reply(handler, 200, stats)

    def _pace(self, messages: list[dict[str, Any]], every: float) -> None:
        """Push each message at its own time on a fixed schedule (a late one does not shift
        the rest), as steady traffic arrives."""
        start = time.monotonic()
        for i, m in enumerate(messages):
            time.sleep(max(0.0, start + i * every - time.monotonic()))
            self._push_timed(m, time.time())

    def _push_timed(self, m: dict[str, Any], at: float) -> None:
        """One message of a load run, pushed `at` (what its reply's latency counts from)."""
        self.pushed_at[m["text"]] = at
        self.push(m["text"], chat_id=m["chat_id"], user_id=m["user_id"])

    def _params(self, handler: BaseHTTPRequestHandler, raw: bytes) -> dict[str, Any]:
        kind = handler.headers.get("content-type", "")
        if "json" in kind:
            return dict(json.loads(raw or b"{}"))
        if kind.startswith("multipart/form-data"):
            return _form(kind, raw)
        out: dict[str, Any] = {}
        for key, values in parse_qs(raw.decode()).items():
            try:
                out[key] = json.loads(values[0])
            except ValueError:
                out[key] = values[0]
        return out

    def _reply(self, handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _download(self, handler: BaseHTTPRequestHandler, file_id: str) -> None:
        """The file download path: GET /file/bot<token>/<file_path>."""
        data = self.files.get(file_id)
        if data is None:
            self._reply(handler, 404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        self.downloads.append(file_id)
        if file_id in self.declared:
            send_unmeasured(handler, data, "application/octet-stream", self.unmeasured)
            return
        try:
            handler.send_response(200)
            handler.send_header("content-type", "application/octet-stream")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _api_getFile(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file_id = str(params.get("file_id"))
        data = self.files.get(file_id)
        if data is None:
            bad = {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}
            return 400, bad
        result = {
            "file_id": file_id,
            "file_unique_id": "u" + file_id,
            "file_path": f"files/{file_id}",
        }
        if (size := self.declared.get(file_id, len(data))) is not None:
            result["file_size"] = size
        return 200, {"ok": True, "result": result}

    def _api_getMe(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {
            "ok": True,
            "result": {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "Rousseau",
                "username": BOT_USERNAME,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            },
        }

    def _api_getUpdates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.drop_polls > 0:
            self.drop_polls -= 1
            return 502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        limit = min(100, max(1, int(params.get("limit") or 100)))
        self.offsets.append(offset)
        deadline = time.monotonic() + timeout
        with self._cond:
            # Telegram forgets updates below the offset: that is the acknowledgement.
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and time.monotonic() < deadline:
                self._cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            batch = list(self.updates[:limit])
        return 200, {"ok": True, "result": batch}

    def _api_sendMessage(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.flood_once is not None:
            retry, self.flood_once = self.flood_once, None
            return 429, {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {retry}",
                "parameters": {"retry_after": retry},
            }
        chat_id = int(params["chat_id"])
        retry = self.flood_chats.pop(chat_id, None)
        if retry is not None:
            self.flood_until[chat_id] = time.monotonic() + retry
        wait = self.flood_until.get(chat_id, 0.0) - time.monotonic()
        if wait > 0:
            return 429, {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {int(wait) + 1}",
                "parameters": {"retry_after": int(wait) + 1},
            }
        sent = Sent(chat_id=chat_id, text=str(params["text"]), params=params)
        return self._record(sent, text=params["text"])

    def _api_editMessageText(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.flood_edits_once is not None:
            retry, self.flood_edits_once = self.flood_edits_once, None
            return 429, {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {retry}",
                "parameters": {"retry_after": retry},
            }
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        found = next(
            (m for m in self.sent if (m.chat_id, m.message_id) == (chat_id, message_id)), None
        )
        if found is None:
            return 400, {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: message to edit not found",
            }
        text = str(params["text"])
        if text == found.shown:
            return 400, {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: message is not modified: specified new message"
                " content and reply markup are exactly the same",
            }
        found.shown = text
        self.edits.append(Edit(chat_id=chat_id, message_id=message_id, text=text))
        return 200, {
            "ok": True,
            "result": {
                "message_id": message_id,
                "date": int(found.at),
                "edit_date": int(time.time()),
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Rousseau"},
                "text": text,
            },
        }

    def _api_sendMessageDraft(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A draft the app animates in a private chat (never a message of its own)."""
        chat_id = int(params["chat_id"])
        if chat_id < 0:
            return 400, {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: drafts can be sent only to private chats",
            }
        self.drafts.append(
            Edit(
                chat_id=chat_id,
                message_id=int(params["draft_id"]),
                text=str(params.get("text") or ""),
                can_stop=params.get("can_stop") in (True, "true", "True"),
            )
        )
        return 200, {"ok": True, "result": True}

    def visible(self, chat_id: int) -> list[str]:
        """What the chat shows of the bot's text messages now, in order."""
        return [m.shown for m in self.sent if m.chat_id == chat_id and "_kind" not in m.params]

    def _record(self, sent: Sent, **content: Any) -> tuple[int, dict[str, Any]]:
        """Keep what the bot sent; answer with the Message the Bot API makes of it."""
        sent.message_id = next(self._message_ids)
        sent.shown = sent.text
        self.sent.append(sent)
        if self.on_sent is not None:
            self.on_sent(sent)
        chat_type = "private" if sent.chat_id > 0 else "group"
        return 200, {
            "ok": True,
            "result": {
                "message_id": sent.message_id,
                "date": int(time.time()),
                "chat": {"id": sent.chat_id, "type": chat_type},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Rousseau"},
                **content,
            },
        }

    def _api_sendPhoto(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self._file_sent("photo", params)

    def _api_sendDocument(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self._file_sent("document", params)

    def _api_sendVoice(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A voice message: the Bot API plays OGG/Opus (and MP3, M4A) as one."""
        upload = params.get("voice")
        if isinstance(upload, tuple) and not upload[1].startswith((b"OggS", b"ID3", b"\xff\xfb")):
            return 400, {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: wrong type of the web page content",
            }
        return self._file_sent("voice", params)

    def _file_sent(self, kind: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A file the bot uploaded: kept as a Sent whose text is the caption and whose
        params hold `_kind`, `_filename` and `_data` (the uploaded bytes)."""
        if self.uploads_down:
            return 502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}
        upload = params.get(kind)
        if not isinstance(upload, tuple):
            return 400, {"ok": False, "error_code": 400, "description": f"Bad Request: no {kind}"}
        filename, data = upload
        chat_id = int(params["chat_id"])
        sent = Sent(
            chat_id=chat_id,
            text=str(params.get("caption") or ""),
            params={**params, "_kind": kind, "_filename": filename, "_data": data},
        )
        described = {
            "file_id": f"sent-{len(self.sent) + 1}",
            "file_unique_id": "u",
            "file_size": len(data),
        }
        if kind == "voice":
            described |= {"duration": int(params.get("duration") or 0), "mime_type": "audio/ogg"}
        media: Any = [{**described, "width": 1, "height": 1}] if kind == "photo" else described
        return self._record(sent, **{kind: media})

    def _api_answerCallbackQuery(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.answered.append(str(params["callback_query_id"]))
        return 200, {"ok": True, "result": True}

    def _api_setMessageReaction(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reaction = params.get("reaction")
        kinds = json.loads(reaction) if isinstance(reaction, str) else reaction or []
        for kind in kinds:
            self.reactions.append(
                (int(params["chat_id"]), int(params["message_id"]), kind.get("emoji", ""))
            )
        return 200, {"ok": True, "result": True}

    def _api_sendChatAction(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "chat_id" not in params:  # a call cancelled mid-body (the turn was already done)
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: chat_id"}
        self.actions.append((int(params["chat_id"]), str(params["action"])))
        return 200, {"ok": True, "result": True}


if __name__ == "__main__":
    import sys

    server = FakeTelegram(token=sys.argv[1] if len(sys.argv) > 1 else "123456:TEST-token").start()
    print(server.url, flush=True)  # noqa: T201 - the parent process reads the address
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


def _form(content_type: str, raw: bytes) -> dict[str, Any]:
    """A multipart/form-data body as the Bot API reads it: fields (JSON-decoded where they
    are JSON) and uploaded files as (filename, bytes)."""
    parsed = BytesParser(policy=email.policy.HTTP).parsebytes(
        f"content-type: {content_type}\r\n\r\n".encode() + raw
    )
    out: dict[str, Any] = {}
    for part in parsed.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is not None:
            out[str(name)] = (filename, payload)
            continue
        value = payload.decode()
        try:
            out[str(name)] = json.loads(value)
        except ValueError:
            out[str(name)] = value
    return out
