"""Feishu and Lark through the official SDK (lark-oapi): its long connection for events (no
public address needed) and its API client for everything sent.

The SDK's long-connection client runs its own event loop, a module-level one it makes when
`lark_oapi` is first imported, and blocks in `start()`. So the SDK is first imported in a
worker thread (never on the daemon's loop), and the client runs in a thread of its own. An
event is handed to the daemon's loop and the client waits there: Feishu is told the event
was taken (the frame's answer) only once the message is persisted, and a message the daemon
could not keep is answered 500, which Feishu delivers again. A dropped connection ends
`run` with a TransportError (the supervisor reconnects with backoff); Feishu keeps and
retries the events it could not deliver meanwhile.

Direct chats are answered; in groups a message that @-mentions the bot is, with a reply to
that message. A reply is shown as it is written in a card updated in place; approvals are a
card's buttons, whose presses come back on the same connection (card.action.trigger).
Images and files come in through the media intake and go out as uploads.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import io
import json
import mimetypes
import re
import threading
import time
from collections import OrderedDict
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.base import Throttled, file_bytes, take_files
from rousseau.transports.unreadable import Unreadable, checked, ident, optional_text, refuse, text

if importlib.util.find_spec("lark_oapi") is None:  # pragma: no cover - only without the extra
    raise MissingExtraError("the feishu transport", "feishu")

log = structlog.get_logger("rousseau.feishu")

MAX_LENGTH = 8_000
"""Characters of one message: a card holds 30 KB of JSON, which this fills even with text
of three-byte characters."""
MAX_FILE_BYTES = 30 * 1024 * 1024
"""The largest file the API uploads (images: 10 MB)."""
MAX_IMAGE_BYTES = 10 * 1024 * 1024
EMOJI_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
"""What Feishu's emoji types look like (GLANCE, THUMBSUP, Fire)."""
CHATS = 1000
"""Chats whose kind is remembered (a bounded cache: one lookup each when forgotten)."""
API_TIMEOUT = 60.0
"""Seconds an API call may take (an upload of 30 MB included)."""
THROTTLED = 99991400
RESET = ("x-ogw-ratelimit-reset", "retry-after")
"""The headers saying how long a rate limit lasts (seconds), the gateway's first."""
"""The API's code for "request trigger frequency limit"."""
REFUSED_APP = frozenset({10003, 10014})
"""Codes saying the app id or secret is wrong."""
STALE_TOKEN = frozenset({99991661, 99991663, 99991668})
"""Codes saying the tenant token sent is not (or no longer) good: fetched anew, once."""
VOICE_TYPES = ("audio/ogg", "audio/opus")
"""What goes out as Feishu's own voice message (an Opus recording)."""
_FAILURES = (OSError, TimeoutError)
_UNREADABLE = (Unreadable, ValueError, TypeError, KeyError, AttributeError)
"""What reading an event of the wrong shape raises (recorded and skipped, never a restart)."""
_SECRET = (
    "feishu.app_secret: Feishu refused the app's credentials ({said}); copy the App ID and "
    "App Secret from the developer console's Credentials & Basic Info page"
)
_LOADED: Any = None
"""The lark_oapi module, once imported (in a worker thread: see the module's note)."""
_CONNECTION = threading.Lock()
"""The SDK's long connection runs on its one module-level loop: one connection a process."""


async def _lark() -> Any:
    global _LOADED
    if _LOADED is None:
        _LOADED = await anyio.to_thread.run_sync(importlib.import_module, "lark_oapi")
    return _LOADED


class _Tokens:
    """The SDK's token cache (its ICache), ours so that a token the API calls stale can be
    dropped (the SDK would keep sending it until it expires)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}

    def get(self, key: str) -> str | None:
        value, until = self._held.get(key, ("", 0.0))
        return value if until > time.time() else None

    def set(self, key: str, value: str, expire: int) -> None:
        self._held[key] = (value, float(expire))

    def clear(self) -> None:
        self._held.clear()


class Refused(TransportError):
    """The API answered a call with an error code (kept: a gone message is not an outage)."""

    def __init__(self, code: int, call: str, said: str) -> None:
        super().__init__(f"feishu: {call} answered {code}: {said}")
        self.code = code


class FeishuTransport:
    name = "feishu"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(self, app_id: str, app_secret: str, *, base_url: str) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.base_url = base_url.rstrip("/")
        self.state: KeyValue = MemoryKeyValue()
        self.media: MediaIntake | None = None
        self._client: Any = None
        self._tokens = _Tokens()
        self._me = ""
        self._app_name = ""
        self._kinds: OrderedDict[str, bool] = OrderedDict()
        """Chat id -> whether it is a group, most recent last."""
        self._handler: InboundHandler | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._ended: BaseException | None = None
        self._up = False

    @property
    def connected(self) -> bool:
        return self._up

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def bind_media(self, media: MediaIntake) -> None:
        self.media = media

    # -- the API ---------------------------------------------------------------------------

    async def _api(self) -> Any:
        if self._client is None:
            lark = await _lark()
            builder = (
                lark.Client.builder()
                .app_id(self.app_id)
                .app_secret(self.app_secret)
                .domain(self.base_url)
                .log_level(lark.LogLevel.ERROR)
                .timeout(API_TIMEOUT)  # (the SDK's own default is none: a hung call stays)
                .cache(self._tokens)
            )
            self._client = await anyio.to_thread.run_sync(builder.build)
        return self._client

    async def _call(self, call: str, method: Any, request: Any, *, whole: bool = False) -> Any:
        """One SDK call, made in a worker thread (the SDK's HTTP and its token fetch block);
        its data. Refused credentials are a TransportAuthError naming the key, a rate limit
        Throttled, any other error code a Refused with the API's message; a stale token is
        fetched anew and the call made once more."""
        try:
            return await self._call_once(call, method, request, whole=whole)
        except Refused as exc:
            if exc.code not in STALE_TOKEN:
                raise
            self._tokens.clear()
            return await self._call_once(call, method, request, whole=whole)

    async def _call_once(self, call: str, method: Any, request: Any, *, whole: bool) -> Any:
        try:
            response = await anyio.to_thread.run_sync(method, request)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code in REFUSED_APP:  # the SDK's own token fetch was refused
                raise TransportAuthError(_SECRET.format(said=f"{code}")) from None
            if isinstance(exc, (*_FAILURES, ConnectionError)) or "requests" in type(exc).__module__:
                raise TransportError(f"feishu: cannot reach {self.base_url}: {exc}") from exc
            raise
        return _answer(response, call, whole=whole)

    async def _raw(self, method: str, uri: str) -> dict[str, Any]:
        """A documented call the SDK has no method for, through its generic request."""
        lark = await _lark()
        request = (
            lark.BaseRequest.builder()
            .http_method(getattr(lark.HttpMethod, method))
            .uri(uri)
            .token_types({lark.AccessTokenType.TENANT})
            .build()
        )
        client = await self._api()
        response = await self._call(f"{method} {uri}", client.request, request, whole=True)
        return response if isinstance(response, dict) else {}

    async def _whoami(self) -> None:
        found = await self._raw("GET", "/open-apis/bot/v3/info")
        bot = found.get("bot")
        if not isinstance(bot, dict) or not bot.get("open_id"):
            raise TransportError("feishu: bot info came without the bot's open_id")
        self._me, self._app_name = str(bot["open_id"]), str(bot.get("app_name", ""))

    # -- taking events in ------------------------------------------------------------------

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        await self._whoami()
        lark = await _lark()
        if not _CONNECTION.acquire(blocking=False):
            raise TransportError("feishu: another Feishu connection runs in this process")
        self._handler = handler
        self._stopping = False
        self._ended = None
        ended = anyio.Event()
        token = anyio.lowlevel.current_token()

        def finished() -> None:
            try:
                anyio.from_thread.run_sync(ended.set, token=token)
            except RuntimeError:  # the daemon's loop is gone: nobody waits
                pass

        self._thread = threading.Thread(
            target=self._serve, args=(lark, token, finished), name="feishu", daemon=True
        )
        try:
            self._thread.start()
            task_status.started()
            await ended.wait()
        finally:
            with anyio.CancelScope(shield=True):
                self._halt()
                await anyio.to_thread.run_sync(self._thread.join, 30)
            self._thread = None
            self._handler = None
            self._up = False
            _CONNECTION.release()
        if self._ended is not None:
            raise self._ended
        if not self._stopping:
            raise TransportError("feishu: the long connection closed")

    def _serve(self, lark: Any, token: Any, finished: Any) -> None:
        """The SDK's long connection, on its own loop in this thread, until it is stopped or
        lost (a lost one is not retried here: the supervisor runs it again)."""
        client = None
        ws = importlib.import_module("lark_oapi.ws.client")
        loop: asyncio.AbstractEventLoop = ws.loop
        try:
            if loop.is_running():  # imported on a running loop, despite _lark
                raise TransportError("feishu: the SDK's loop is already running")
            asyncio.set_event_loop(loop)
            _run_out(loop, asyncio.sleep(0))  # noqa: TID251 - a stop queued by the last run, spent
            self._loop = loop
            events = (
                lark.EventDispatcherHandler.builder("", "")
                .register_p2_customized_event("im.message.receive_v1", self._on_event(token))
                .register_p2_card_action_trigger(self._on_press(token))
                .build()
            )
            client = ws.Client(
                self.app_id,
                self.app_secret,
                log_level=lark.LogLevel.ERROR,  # INFO would log the connection's ticket
                event_handler=events,
                domain=self.base_url,
            )
            client.on_reconnecting = self._lost
            if self._stopping:  # stopped before its loop ran: a stop now would be lost
                return
            self._up = True
            log.info("feishu.connecting", app=self._app_name)
            client.start()  # returns only by raising: stopped, lost, or refused
        except Exception as exc:
            if not self._stopping:
                self._ended = _ended_by(exc)
        finally:
            self._up = False
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            _run_out(loop, asyncio.gather(*pending, return_exceptions=True))
            if client is not None:  # the SDK's own close; start() has no counterpart
                _run_out(loop, client._disconnect())
            self._loop = None
            finished()

    def _lost(self) -> None:
        """The SDK found its connection gone (called on its loop): rather than its own slow
        retries, end the run; the supervisor connects again."""
        self._up = False
        if self._loop is not None:
            self._loop.stop()

    def _halt(self) -> None:
        self._stopping = True
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)

    def _on_event(self, token: Any) -> Any:
        def take(event: Any) -> None:  # on the SDK's thread: it answers once this returns
            anyio.from_thread.run(self._event, event.header, event.event, token=token)

        return take

    async def _event(self, header: Any, event: Any) -> None:
        """One message event: taken in (a failure to keep it raises, and Feishu delivers it
        again); anything unreadable recorded and skipped (never a restart)."""
        handler = self._handler
        if handler is None:
            raise TransportError("feishu: not running")
        try:
            if header is not None and getattr(header, "app_id", None) not in (None, self.app_id):
                raise Unreadable("an event for another app")
            read = await self._read(event)
        except _UNREADABLE as exc:
            refuse(self, exc, kind="im.message.receive_v1", message=_event_id(header))
            return
        if read is None:
            return
        inbound, files = read
        inbound = await take_files(inbound, self.media, files, unavailable=(TransportError,))
        await handler(inbound)

    async def _read(self, event: Any) -> tuple[Inbound, list[Incoming]] | None:
        """A message as the router takes it, with its files; None for one not to answer
        (another app's, a sticker, an empty one)."""
        if not isinstance(event, dict):
            raise Unreadable("event is not an object")
        sender, message = event.get("sender"), event.get("message")
        if not isinstance(sender, dict) or not isinstance(message, dict):
            raise Unreadable("event without sender or message")
        if sender.get("sender_type") != "user":
            return None  # an app's (our own included: Feishu does not echo them)
        ids = sender.get("sender_id")
        if not isinstance(ids, dict):
            raise Unreadable("sender without ids")
        user = ident(ids.get("open_id"), "open_id")
        chat = ident(message.get("chat_id"), "chat_id")
        message_id = ident(message.get("message_id"), "message_id")
        group = text(message.get("chat_type"), "chat_type") != "p2p"
        self._remember(chat, group)
        kind = text(message.get("message_type"), "message_type")
        content = _content(text(message.get("content"), "content"))
        mentions = message.get("mentions") or []
        if not isinstance(mentions, list) or not all(isinstance(m, dict) for m in mentions):
            raise Unreadable("mentions is not a list of objects")
        said, files = self._said(kind, content, message_id)
        mentioned = False
        for mention in mentions:
            key = text(mention.get("key"), "mention key")
            who = mention.get("id") if isinstance(mention.get("id"), dict) else {}
            if who.get("open_id") == self._me:
                mentioned = True
                said = said.replace(key, "")
            else:
                said = said.replace(key, f"@{text(mention.get('name', ''), 'mention name')}")
        said = " ".join(said.split(" ")).strip()
        if not said and not files:
            return None
        root = optional_text(message.get("root_id"), "root_id") or None
        stamp = optional_text(message.get("create_time"), "create_time") or ""
        inbound = Inbound(
            transport=self.name,
            chat_id=chat,
            sender_id=user,
            message_id=message_id,
            text=said,
            is_group=group,
            mentioned=not group or mentioned,
            thread_id=(root or message_id) if group else None,
            at=int(stamp) / 1000 if stamp.isdigit() else time.time(),
        )
        return checked(inbound), files

    def _said(self, kind: str, content: Any, message_id: str) -> tuple[str, list[Incoming]]:
        """A message's words and files, by its type."""
        if not isinstance(content, dict):
            raise Unreadable("content is not an object")
        if kind == "text":
            return text(content.get("text"), "text"), []
        if kind == "post":
            return self._post(content, message_id)
        if kind == "image":
            key = ident(content.get("image_key"), "image_key")
            return "", self._file(message_id, key, "image", "image.jpg", "image/jpeg")
        if kind in ("file", "audio", "media"):
            key = ident(content.get("file_key"), "file_key")
            default = {"audio": "voice.opus", "media": "video.mp4"}.get(kind, "file")
            name = optional_text(content.get("file_name"), "file_name") or default
            media_type = "audio/ogg" if kind == "audio" else _type_of(name)
            return "", self._file(message_id, key, "file", name, media_type, voice=kind == "audio")
        return "", []  # a sticker, a shared chat, a card: nothing to answer

    def _post(self, content: dict[str, Any], message_id: str) -> tuple[str, list[Incoming]]:
        """Rich text: its paragraphs' words (a mention as its key, read like a text's), and
        its images and videos as files."""
        if "content" not in content and len(content) == 1:  # under a language, as some send
            content = next(iter(content.values()))
            if not isinstance(content, dict):
                raise Unreadable("post content is not an object")
        paragraphs = content.get("content") or []
        if not isinstance(paragraphs, list):
            raise Unreadable("post paragraphs are not a list")
        lines = [text(content.get("title") or "", "title")]
        files: list[Incoming] = []
        for paragraph in paragraphs:
            if not isinstance(paragraph, list):
                raise Unreadable("a post paragraph is not a list")
            words = []
            for element in paragraph:
                if not isinstance(element, dict):
                    raise Unreadable("a post element is not an object")
                tag = element.get("tag")
                if tag in ("text", "a", "code_block", "md"):
                    words.append(text(element.get("text", ""), "text"))
                elif tag == "at":
                    words.append(text(element.get("user_id", ""), "at"))
                elif tag == "img":
                    key = ident(element.get("image_key"), "image_key")
                    files += self._file(message_id, key, "image", "image.jpg", "image/jpeg")
                elif tag == "media":
                    key = ident(element.get("file_key"), "file_key")
                    files += self._file(message_id, key, "file", "video.mp4", "video/mp4")
            lines.append("".join(words))
        return "\n".join(line for line in lines if line), files

    def _file(
        self,
        message_id: str,
        key: str,
        kind: str,
        name: str,
        media_type: str,
        *,
        voice: bool = False,
    ) -> list[Incoming]:
        if self.media is None:
            return []
        fetch = functools.partial(self._download, message_id, key, kind)
        return [Incoming(name=name, media_type=media_type, size=None, fetch=fetch, voice=voice)]

    async def _download(self, message_id: str, key: str, kind: str, into: Download) -> None:
        """A message's file, streamed to the intake (the SDK's own call reads a whole file
        into memory, and a person's video can be gigabytes)."""
        import aiohttp

        token = await self._tenant_token()
        url = f"{self.base_url}/open-apis/im/v1/messages/{message_id}/resources/{key}"
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                async with http.get(url, params={"type": kind}, headers=headers) as response:
                    if response.status >= 400:
                        if response.status in (400, 401):  # a stale token among the causes
                            self._tokens.clear()
                        raise TransportError(f"feishu: file {key}: {response.status}")
                    into.declared(response.content_length)
                    await into.write_all(response.content.iter_chunked(CHUNK))
        except aiohttp.ClientError as exc:
            raise TransportError(f"feishu: file {key}: {exc}") from exc

    async def _tenant_token(self) -> str:
        """The app's tenant access token, from the SDK's own cache (fetched when stale)."""
        client = await self._api()
        manager = importlib.import_module("lark_oapi.core.token").TokenManager
        try:
            return str(await anyio.to_thread.run_sync(manager.get_self_tenant_token, client.config))
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code in REFUSED_APP:
                raise TransportAuthError(_SECRET.format(said=code)) from None
            raise TransportError(f"feishu: no tenant token: {exc}") from exc

    def _on_press(self, token: Any) -> Any:
        model = importlib.import_module("lark_oapi.event.callback.model.p2_card_action_trigger")

        def take(pressed: Any) -> Any:  # on the SDK's thread: its answer is the response
            said = anyio.from_thread.run(self._press, pressed.event, token=token)
            return model.P2CardActionTriggerResponse({"toast": {"type": "info", "content": said}})

        return take

    async def _press(self, event: Any) -> str:
        """A card's button pressed: its answer taken as a message from whoever pressed it;
        what the toast shown to them says."""
        handler = self._handler
        try:
            user = ident(event.operator.open_id, "operator")
            value = event.action.value
            answer = text(value.get("answer") if isinstance(value, dict) else None, "answer")
            chat = ident(event.context.open_chat_id, "open_chat_id")
            message = ident(event.context.open_message_id, "open_message_id")
        except _UNREADABLE as exc:
            refuse(self, exc if isinstance(exc, Unreadable) else Unreadable(str(exc)))
            return "This button is not one of rousseau's."
        if handler is None:
            raise TransportError("feishu: not running")
        inbound = Inbound(
            transport=self.name,
            chat_id=chat,
            sender_id=user,
            message_id=f"{message}/pressed/{user}/{answer}"[:200],
            text=answer,
            is_group=await self._is_group(chat),
            mentioned=True,
        )
        await handler(checked(inbound))
        return f"Answered: {answer}"

    def _remember(self, chat: str, group: bool) -> None:
        self._kinds[chat] = group
        self._kinds.move_to_end(chat)
        while len(self._kinds) > CHATS:
            self._kinds.popitem(last=False)

    async def _is_group(self, chat: str) -> bool:
        if chat not in self._kinds:
            found = await self._raw("GET", f"/open-apis/im/v1/chats/{chat}")
            data = found.get("data")
            mode = data.get("chat_mode", "group") if isinstance(data, dict) else "group"
            self._remember(chat, mode != "p2p")
        return self._kinds[chat]

    # -- sending ---------------------------------------------------------------------------

    async def _send(self, chat_id: str, thread_id: str | None, kind: str, content: str) -> str:
        """A message: a reply to the thread's message in a group's thread, else a new one
        in the chat; its id."""
        lark, client = await _lark(), await self._api()
        im = lark.api.im.v1
        if thread_id:
            body = im.ReplyMessageRequestBody.builder().msg_type(kind).content(content).build()
            request = (
                im.ReplyMessageRequest.builder().message_id(thread_id).request_body(body).build()
            )
            sent = await self._call("reply", client.im.v1.message.reply, request)
        else:
            body = (
                im.CreateMessageRequestBody.builder()
                .receive_id(chat_id)
                .msg_type(kind)
                .content(content)
                .build()
            )
            request = (
                im.CreateMessageRequest.builder()
                .receive_id_type("chat_id")
                .request_body(body)
                .build()
            )
            sent = await self._call("send", client.im.v1.message.create, request)
        return str(sent.message_id)

    async def _update_card(self, message_id: str, card: str) -> None:
        lark, client = await _lark(), await self._api()
        im = lark.api.im.v1
        body = im.PatchMessageRequestBody.builder().content(card).build()
        request = im.PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        await self._call("card update", client.im.v1.message.patch, request)

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: a card sent, then updated in place (rousseau.streaming)."""
        if message_id is None:
            return await self._send(chat_id, thread_id, "interactive", _card(text))
        await self._update_card(message_id, _card(text))
        return message_id

    async def send(self, message: Outbound) -> None:
        """One message (a rate limit raises Throttled: the outbox sends it again when the API
        said)."""
        if message.replaces is not None and message.attachment is None:
            try:
                await self._update_card(message.replaces, _card(message.text, message.buttons))
                return
            except Refused as exc:
                log.info("feishu.card_gone", code=exc.code)  # deleted meanwhile: sent anew
        if message.attachment is not None:
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                message = data
            else:
                await self._send_file(message, data)
                return
        if message.buttons:
            card = _card(message.text, message.buttons)
            await self._send(message.chat_id, message.thread_id, "interactive", card)
            return
        await self._send(message.chat_id, message.thread_id, *_words(message.text))

    async def _send_file(self, message: Outbound, data: bytes) -> None:
        """A file with its caption: an image in a rich-text message with its words under it;
        any other file (which rich text cannot hold) with its words as a reply to it."""
        kind, content = await self._upload(message, data)
        chat, thread = message.chat_id, message.thread_id
        if kind == "image" and message.text:
            paragraphs = [[{"tag": "img", **content}], [{"tag": "text", "text": message.text}]]
            post = {"en_us": {"title": "", "content": paragraphs}}
            await self._send(chat, thread, "post", json.dumps(post, ensure_ascii=False))
            return
        sent = await self._send(chat, thread, kind, json.dumps(content))
        if message.text:
            await self._send(chat, sent, *_words(message.text))

    async def _upload(self, message: Outbound, data: bytes) -> tuple[str, dict[str, str]]:
        """The file uploaded; the message type and content that show it."""
        attachment = message.attachment
        assert attachment is not None
        lark, client = await _lark(), await self._api()
        im = lark.api.im.v1
        if attachment.is_image and len(data) <= MAX_IMAGE_BYTES:
            named = (attachment.name or "image", io.BytesIO(data), attachment.media_type)
            body = im.CreateImageRequestBody.builder().image_type("message").image(named)
            request = im.CreateImageRequest.builder().request_body(body.build()).build()
            made = await self._call("image upload", client.im.v1.image.create, request)
            return "image", {"image_key": made.image_key}
        voice = attachment.voice and attachment.media_type in VOICE_TYPES
        name = attachment.name or ("voice.opus" if voice else "file")
        body = (
            im.CreateFileRequestBody.builder()
            .file_type(_file_type(name, voice=voice))
            .file_name(name)
            .file((name, io.BytesIO(data), attachment.media_type))  # a part with its name
        )
        if voice and attachment.duration:
            body = body.duration(int(attachment.duration * 1000))
        request = im.CreateFileRequest.builder().request_body(body.build()).build()
        made = await self._call("file upload", client.im.v1.file.create, request)
        return ("audio" if voice else "file"), {"file_key": made.file_key}

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """`emoji`, by Feishu's name for it (an emoji_type such as GLANCE, OK, THUMBSUP,
        DONE), on the sender's message."""
        name = emoji.strip(":")
        if not EMOJI_TYPE.fullmatch(name):
            log.warning("feishu.emoji_not_a_type", emoji=emoji, hint="name it, e.g. GLANCE")
            return
        lark, client = await _lark(), await self._api()
        im = lark.api.im.v1
        body = (
            im.CreateMessageReactionRequestBody.builder()
            .reaction_type(im.Emoji.builder().emoji_type(name).build())
            .build()
        )
        request = (
            im.CreateMessageReactionRequest.builder()
            .message_id(inbound.message_id)
            .request_body(body)
            .build()
        )
        await self._call("reaction", client.im.v1.message_reaction.create, request)

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        """Nothing: Feishu has no typing indicator a bot can set (a streamed reply's card
        shows the answer being written instead)."""

    async def stop(self) -> None:
        self._halt()

    async def check(self) -> str:
        """One harmless call (the bot's own info) proving the address and the credentials."""
        await self._whoami()
        return f"{self._app_name or 'the bot'} ({self._me}) on {self.base_url}"

    async def aclose(self) -> None:
        self._client = None


def _answer(response: Any, call: str, *, whole: bool = False) -> Any:
    """The data of an SDK response (`whole`: its whole JSON body); its error code raised as
    ours."""
    raw = getattr(response, "raw", None)
    status = int(getattr(raw, "status_code", 200))
    code, message = getattr(response, "code", None), getattr(response, "msg", "") or ""
    if code == THROTTLED or status == 429:
        raise Throttled.asked(getattr(raw, "headers", None) or {}, *RESET)
    if code in REFUSED_APP:
        raise TransportAuthError(_SECRET.format(said=f"{code}: {message}"))
    if code:
        raise Refused(int(code), call, str(message)[:200])
    if code is None or status >= 400:
        raise TransportError(f"feishu: {call} answered {status}")
    if not whole:
        return getattr(response, "data", None)
    try:
        return json.loads(getattr(raw, "content", None) or b"{}")
    except ValueError:
        raise TransportError(f"feishu: {call} answered {status}, not JSON") from None


def _run_out(loop: asyncio.AbstractEventLoop, work: Any) -> None:
    """`work` run to its end on the SDK's loop, through any stop queued before it (a lost
    connection's and a halt's can both be): a stop ends one run, not the work."""
    future = asyncio.ensure_future(work, loop=loop)
    while not future.done():
        try:
            loop.run_until_complete(future)
        except RuntimeError:
            continue
    if not future.cancelled():
        future.exception()  # retrieved: a failed close is nothing to report


def _ended_by(exc: BaseException) -> BaseException:
    """Why the long connection ended, as the supervisor takes it."""
    if isinstance(exc, TransportError):
        return exc
    if type(exc).__name__ == "ClientException":  # the endpoint refused the app
        code = getattr(exc, "code", None)
        return TransportAuthError(_SECRET.format(said=f"{code}: {getattr(exc, 'msg', exc)}"))
    if isinstance(exc, RuntimeError):  # its loop stopped: the connection was lost
        return TransportError("feishu: the long connection was lost")
    return TransportError(f"feishu: the long connection failed: {exc}")


def _content(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise Unreadable(f"content is not JSON: {exc}") from None


def _event_id(header: Any) -> str:
    return str(getattr(header, "event_id", "") or "")[:40]


def _words(said: str) -> tuple[str, str]:
    return "text", json.dumps({"text": said}, ensure_ascii=False)


def _card(said: str, buttons: tuple[str, ...] = ()) -> str:
    """A card showing `said` (Markdown), with `buttons` whose presses carry their answer;
    shared so that an update reaches everyone who sees it."""
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": said or " "}]
    if buttons:
        actions = [
            {
                "tag": "button",
                "text": {"tag": "plain_text", "content": label},
                "type": "primary" if n == 0 else "default",
                "value": {"answer": label},
            }
            for n, label in enumerate(buttons)
        ]
        elements.append({"tag": "action", "actions": actions})
    card = {"config": {"wide_screen_mode": True, "update_multi": True}, "elements": elements}
    return json.dumps(card, ensure_ascii=False)


def _type_of(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _file_type(name: str, *, voice: bool) -> str:
    """The upload's file_type, as the API names the kinds it previews (stream: any other)."""
    if voice:
        return "opus"
    extension = name.rpartition(".")[2].lower()
    kinds = {"mp4": "mp4", "pdf": "pdf", "doc": "doc", "docx": "doc", "xls": "xls"}
    kinds |= {"xlsx": "xls", "ppt": "ppt", "pptx": "ppt", "opus": "opus"}
    return kinds.get(extension, "stream")
