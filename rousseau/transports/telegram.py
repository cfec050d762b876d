"""Telegram through python-telegram-bot: long polling or a webhook, private chats and groups,
flood control.

An update is acknowledged (the next getUpdates offset moves past it, or the webhook's answer
is 200) only after the Router has persisted it, so a crash never loses a message; Telegram
redelivers what was not acknowledged.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import Attachment, MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.transports.abilities import Posts
from rousseau.transports.base import Throttled, describe, file_bytes, take_by_chat, take_files
from rousseau.transports.split import utf16_len
from rousseau.transports.telegram_http import AiohttpRequest
from rousseau.transports.unreadable import (
    Unreadable,
    checked,
    ident,
    integer_id,
    number,
    refuse,
    text,
)

# Time periods as timedelta (the SDK's coming default): without this, merely building a
# RetryAfter error warns, and a flood wait surfaces as a warning instead of a wait.
os.environ.setdefault("PTB_TIMEDELTA", "true")

try:
    import telegram
    from telegram.error import BadRequest, InvalidToken, RetryAfter, TelegramError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the telegram transport", "telegram") from exc

log = structlog.get_logger("rousseau.telegram")

MAX_LENGTH = 4096
MAX_FILE_BYTES = 50_000_000
"""The largest file a bot may send (through the cloud Bot API)."""
MAX_PHOTO_BYTES = 10_000_000
"""Photos larger than this go as documents."""
_PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
POLL_TIMEOUT = 25
POLL_LIMIT = 20
"""Updates asked for per poll. The SDK parses a whole batch in one go on the event loop (about
a quarter of a millisecond per update), so a full batch of 100 would hold it for 25+ ms."""
_GROUPS = ("group", "supergroup")
_STOPPED = "stopped_message_generation"
_UPDATES = ["message", "callback_query", _STOPPED]
"""The kinds of update asked for, by getUpdates or the webhook; the last is a press of a
draft's stop button (Bot API 10.3, newer than the SDK: read from the update's api_kwargs)."""
_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@dataclass(frozen=True, slots=True)
class Webhook:
    """Updates posted to the daemon instead of long polling."""

    url: str
    """The public HTTPS address Telegram posts to (a proxy or load balancer before the daemons)."""
    listen: str = "127.0.0.1:8443"
    """Where this daemon takes the posts, host:port."""
    secret: str = ""
    """What Telegram sends with each post, checked; empty: one made from the bot token."""


class TelegramTransport:
    name = "telegram"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(utf16_len)

    def __init__(
        self,
        token: str,
        *,
        base_url: str | None = None,
        poll_timeout: int = POLL_TIMEOUT,
        webhook: Webhook | None = None,
    ):
        root = (base_url or "https://api.telegram.org").rstrip("/")
        root = root if root.endswith("/bot") else root + "/bot"
        self._requests = (
            AiohttpRequest(),
            AiohttpRequest(connections=1, read_timeout=poll_timeout + 10),
        )
        self.bot = telegram.Bot(
            token,
            base_url=root,
            base_file_url=root.removesuffix("/bot") + "/file/bot",
            request=self._requests[0],
            get_updates_request=self._requests[1],
        )
        self.media: MediaIntake | None = None
        self.poll_timeout = poll_timeout
        self._connected = False
        self._scope: anyio.CancelScope | None = None
        self._offset: int | None = None
        self._me: Any = None
        self.webhook = webhook
        self.shares_connections = webhook is not None
        """With a webhook, every daemon of a cluster takes posts (see Transport)."""
        self._secret = ""
        if webhook is not None:  # the same on every daemon of a cluster, unless one is set
            made = hashlib.sha256(f"rousseau-webhook:{token}".encode()).hexdigest()[:48]
            self._secret = webhook.secret or made
        self.posts = (
            Posts(
                transport=self.name,
                listen=webhook.listen,
                path=urlsplit(webhook.url).path or "/",
                take=self._take_post,
            )
            if webhook is not None
            else None
        )
        """Where the daemon takes Telegram's posts, with a webhook."""
        self._handler: InboundHandler | None = None

    @property
    def connected(self) -> bool:
        return self._connected

    def bind_state(self, state: KeyValue) -> None:
        """Telegram keeps nothing: the update offset lives on Telegram's side."""

    def bind_media(self, media: MediaIntake) -> None:
        """Take photos, documents, voice notes and audio in (unbound, only their captions)."""
        self.media = media

    def _failed(self, doing: str, exc: TelegramError) -> TransportError:
        """The SDK's error in rousseau's tree; an invalid token is permanent."""
        if isinstance(exc, InvalidToken):  # the Bot API answers 401 (or 404) to a bad token
            return TransportAuthError(
                "telegram.token: the bot token was rejected by the Bot API; "
                "set the token @BotFather gave the bot"
            )
        return TransportError(f"telegram: {doing} ({describe(exc, self.bot.token)})")

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            try:
                await self.bot.initialize()
                self._me = self.bot.bot
                self._handler = handler  # posts are taken from here on (see _take_post)
                if self.webhook is None:
                    await self.bot.delete_webhook()
                else:
                    await self.bot.set_webhook(
                        self.webhook.url, secret_token=self._secret, allowed_updates=_UPDATES
                    )
            except TelegramError as exc:
                raise self._failed("cannot reach the Bot API", exc) from exc
            self._connected = True
            log.info("telegram.connected", bot=self._me.username, webhook=self.webhook is not None)
            task_status.started()
            with anyio.CancelScope() as self._scope:
                while self.webhook is None:
                    await self._poll(handler)
                await anyio.sleep_forever()  # the daemon's server takes the posts
        finally:
            self._connected = False
            self._scope = None
            self._handler = None

    async def _take_post(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """One posted update: 200 once it is persisted (or is one to skip); an error status
        otherwise, so that Telegram posts it again (to this daemon or, behind a balancer,
        another)."""
        given = headers.get(_SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            log.warning("telegram.webhook_refused", reason="wrong secret token")
            return 403, ""
        handler = self._handler
        if handler is None:  # not running (yet, or any more): posted again later
            return 503, ""
        try:
            data = json.loads(body)
        except ValueError as exc:  # not JSON, or not UTF-8: posted again, it would fail again
            refuse(self, exc, event="bad_update", update=None)
            return 200, "skipped"
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if not isinstance(update_id, int):
            refuse(self, "no update_id", event="bad_update", update=None)
            return 200, "skipped"
        update = self._parse(update_id, data)
        try:
            await self._take(self._read(update_id, update), handler)
        except Exception as exc:  # not persisted (stopping, or the store failed)
            log.info("telegram.webhook_retry", update=update_id, error=type(exc).__name__)
            return 503, ""
        return 200, "ok" if update is not None else "skipped"

    async def _poll(self, handler: InboundHandler) -> None:
        try:
            updates: list[tuple[int, Any]] = [
                (u.update_id, u)
                for u in await self.bot.get_updates(
                    offset=self._offset,
                    limit=POLL_LIMIT,
                    timeout=self.poll_timeout,
                    allowed_updates=_UPDATES,
                )
            ]
        except RetryAfter as exc:
            await anyio.sleep(_seconds(exc))
            return
        except TelegramError as exc:
            self._connected = False
            raise self._failed("polling failed", exc) from exc
        except Exception:  # the SDK could not parse one of them: take the rest one by one
            updates = self._parse_each()
        self._connected = True
        await self._take_all(updates, handler)

    async def _take_all(self, updates: list[tuple[int, Any]], handler: InboundHandler) -> None:
        """A poll's updates, read, then taken by chat (see take_by_chat). The offset passes
        an update only once it and every update before it were taken; one that could not be
        read is passed at once."""
        read = [self._read(update_id, update) for update_id, update in updates]
        failed = await take_by_chat(read, _chat_of, lambda taking: self._take(taking, handler))
        if failed:  # polled again from there
            first = min(failed)
            self._offset = updates[first][0]
            raise failed[first]
        if updates:
            self._offset = updates[-1][0] + 1

    async def _take(self, read: _Read, handler: InboundHandler) -> None:
        """One update, polled or posted: its message handed over (with its files) and
        persisted, then a pressed button's spinner stopped; raises if it was not persisted
        (it must not be acknowledged)."""
        if read.inbound is not None:
            inbound = await self._with_files(read.inbound, read.files)
            await handler(inbound)  # persisted: now it may be acknowledged
        if read.update is not None and read.update.callback_query is not None:
            await self._answered(read.update.callback_query)

    def _parse_each(self) -> list[tuple[int, Any]]:
        """The last batch, each update parsed on its own; one that cannot be is kept as None
        (recorded and skipped), so it cannot block the ones behind it forever."""
        raw = json.loads(self._requests[1].last_payload or b"{}").get("result") or []
        out: list[tuple[int, Any]] = []
        for item in raw:
            update_id = item.get("update_id") if isinstance(item, dict) else None
            if isinstance(update_id, int):
                out.append((update_id, self._parse(update_id, item)))
            else:  # nothing to acknowledge it by: the next update's offset passes it
                refuse(self, "no update_id", event="bad_update", update=None)
        return out

    def _parse(self, update_id: int, item: dict[str, Any]) -> Any:
        """An update as the SDK parses it; None (recorded as failed) when it cannot."""
        try:
            return telegram.Update.de_json(item, self.bot)
        except Exception as exc:  # a malformed update is skipped, never retried forever
            refuse(self, exc, event="bad_update", update=update_id)
            return None

    def _read(self, update_id: int, update: Any) -> _Read:
        """What an update brings: its message (checked) and the files it carries. One that
        cannot be read is recorded as failed and brings nothing; this never raises."""
        if update is None:
            return _Read(update_id=update_id, update=None)
        try:
            inbound = self._normalise(update)
            if inbound is None:
                return _Read(update_id=update_id, update=update)
            message = update.message
            files = _files(message) if message is not None and self.media is not None else []
            return _Read(update_id=update_id, update=update, inbound=checked(inbound), files=files)
        except Exception as exc:  # a malformed update is skipped, never retried forever
            refuse(self, exc, event="bad_update", update=update_id)
            return _Read(update_id=update_id, update=None)

    async def _answered(self, query: Any) -> None:
        """Stop the pressed button's spinner (best effort: the press is already taken)."""
        try:
            await self.bot.answer_callback_query(query.id)
        except TelegramError as exc:
            log.debug("telegram.callback_answer_failed", error=str(exc))

    def _pressed(self, query: Any) -> Inbound | None:
        """A pressed answer button: an ordinary message with the button's text, from whoever
        pressed it, in the chat of the message that carried the button."""
        message = query.message
        if not query.data or message is None or query.from_user is None:
            return None
        return Inbound(
            transport=self.name,
            chat_id=integer_id(message.chat.id, "chat id"),
            sender_id=integer_id(query.from_user.id, "sender id"),
            message_id=f"button:{ident(query.id, 'query id')}",
            text=text(query.data, "button data"),
            is_group=message.chat.type in _GROUPS,
            mentioned=True,
            sender_name=query.from_user.full_name or "",
        )

    def _stopped(self, update: Any, stopped: Any) -> Inbound | None:
        """The stop button of a draft, pressed: `/stop` from that private chat (the router
        cancels the turn writing it)."""
        chat = _stopped_chat(stopped)
        if chat is None:
            return None
        return Inbound(
            transport=self.name,
            chat_id=str(chat),
            sender_id=str(chat),  # drafts are for private chats only
            message_id=f"stop:{update.update_id}",
            text="/stop",
        )

    def _normalise(self, update: Any) -> Inbound | None:
        if update.callback_query is not None:
            return self._pressed(update.callback_query)
        stopped = update.api_kwargs.get(_STOPPED)
        if stopped is not None:
            return self._stopped(update, stopped)
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return None  # edits, channel posts, our own and other bots' messages
        said = text(message.text, "text") or text(message.caption, "caption")
        if not said and not (self.media is not None and _files(message)):
            return None
        chat = message.chat
        chat_id = integer_id(chat.id, "chat id")
        said, mentioned = self._mentions(message, said)
        thread = message.message_thread_id if getattr(message, "is_topic_message", False) else None
        return Inbound(
            transport=self.name,
            chat_id=chat_id,
            sender_id=integer_id(message.from_user.id, "sender id"),
            message_id=f"{chat_id}:{integer_id(message.message_id, 'message id')}",
            text=said,
            is_group=chat.type in _GROUPS,
            mentioned=mentioned,
            thread_id=integer_id(thread, "thread id") if thread is not None else None,
            sender_name=message.from_user.full_name or "",
            at=message.date.timestamp() if message.date else 0.0,
        )

    async def _with_files(self, inbound: Inbound, files: list[_File]) -> Inbound:
        """The inbound with its files downloaded and stored (see take_files), before the
        update is acknowledged, so a crash fetches them again. A file the Bot API will not
        give (gone, or past its 20 MB download limit) is noted; a network failure leaves
        the update to be polled again."""
        incoming = [
            Incoming(
                name=f.name,
                media_type=f.media_type,
                size=f.size,
                fetch=functools.partial(self._download, f.file_id),
                voice=f.voice is not None,
                duration=f.voice,
            )
            for f in files
        ]
        try:
            return await take_files(inbound, self.media, incoming, unavailable=(BadRequest,))
        except TelegramError as exc:
            raise self._failed("downloading a file failed", exc) from exc

    async def _download(self, file_id: str, into: Download) -> None:
        file = await self.bot.get_file(file_id)
        if not file.file_path:
            raise BadRequest("getFile gave no file path")
        into.declared(file.file_size)
        await self._requests[0].download(file.file_path, into)

    def _mentions(self, message: Any, text: str) -> tuple[str, bool]:
        """Whether the bot is addressed (mention, reply, /cmd@bot), and the text to keep.

        Entity offsets count UTF-16 code units, not characters: the SDK's parse_entities reads
        each entity's text, and `_index` turns an offset into a place in `text`.
        """
        me = self._me
        handle = f"@{me.username}".lower() if me and me.username else ""
        mentioned = False
        reply = message.reply_to_message
        if reply is not None and reply.from_user is not None and me is not None:
            mentioned = reply.from_user.id == me.id
        if message.text:
            entities = message.parse_entities()
        else:
            entities = message.parse_caption_entities()
        commands: list[int] = []  # where each /cmd@bot ends, in UTF-16 code units
        for entity, part in entities.items():
            named = part.lower()
            if entity.type == "mention" and handle and named == handle:
                mentioned = True
            elif entity.type == "text_mention" and entity.user is not None and me is not None:
                mentioned = mentioned or entity.user.id == me.id
            elif entity.type == "bot_command" and handle and named.endswith(handle):
                mentioned = True
                commands.append(entity.offset + entity.length)
        for end in sorted(commands, reverse=True):  # from the end: earlier places stay put
            cut = _index(text, end)
            text = text[: cut - len(handle)] + text[cut:]
        return text, mentioned

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def send(self, message: Outbound) -> None:
        params: dict[str, Any] = {}
        if message.thread_id:
            params["message_thread_id"] = int(message.thread_id)
        if message.reply_to and message.chat_id.startswith("-"):
            # Quote the question in groups, where answers need their context.
            params["reply_parameters"] = telegram.ReplyParameters(
                message_id=int(message.reply_to.rsplit(":", 1)[1]),
                allow_sending_without_reply=True,
            )
        if message.buttons:  # one row; callback data is the button's own text (<= 64 bytes)
            params["reply_markup"] = telegram.InlineKeyboardMarkup(
                [[telegram.InlineKeyboardButton(b, callback_data=b[:64]) for b in message.buttons]]
            )
        for _ in range(5):
            try:
                await self.bot.initialize()  # at once if done: `rousseau send` has no run()
                if message.attachment is not None:
                    await self._send_file(message, message.attachment, params)
                elif message.replaces is None or not await self._edit(message):
                    await self.bot.send_message(
                        chat_id=int(message.chat_id), text=message.text, **params
                    )
                return
            except RetryAfter as exc:
                delay = _seconds(exc)
                log.info("telegram.flood_control", retry_after=delay)
                await anyio.sleep(delay)
            except TelegramError as exc:
                raise self._failed("sending failed", exc) from exc
        raise TransportError("telegram: flood control did not clear")

    async def _edit(self, message: Outbound) -> bool:
        """The streamed preview `message.replaces` edited into the final text; False when it
        is gone (deleted by the user, or too old to edit) and the text must be sent anew."""
        assert message.replaces is not None
        try:
            await self.bot.edit_message_text(
                message.text, chat_id=int(message.chat_id), message_id=int(message.replaces)
            )
        except BadRequest as exc:
            if "not modified" in str(exc).lower():
                return True  # it shows exactly this already (a retry after a lost answer)
            log.info("telegram.preview_gone", error=describe(exc, self.bot.token))
            return False
        return True

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: sent, then edited in place (see rousseau.streaming)."""
        try:
            if message_id is None:
                sent = await self.bot.send_message(
                    chat_id=int(chat_id),
                    text=text,
                    message_thread_id=int(thread_id) if thread_id else None,
                )
                return str(sent.message_id)
            await self.bot.edit_message_text(text, chat_id=int(chat_id), message_id=int(message_id))
            return message_id
        except RetryAfter as exc:
            raise Throttled(_seconds(exc)) from exc
        except BadRequest as exc:
            if "not modified" in str(exc).lower():
                return message_id or ""
            raise self._failed("a preview failed", exc) from exc
        except TelegramError as exc:
            raise self._failed("a preview failed", exc) from exc

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """`emoji` on the sender's message (one of the reactions Telegram allows)."""
        chat, _, message = inbound.message_id.partition(":")
        if not message.isdigit():
            return  # a button press or a stop: no message to react to
        try:
            await self.bot.set_message_reaction(
                chat_id=int(chat), message_id=int(message), reaction=emoji
            )
        except RetryAfter as exc:
            raise Throttled(_seconds(exc)) from exc
        except TelegramError as exc:
            raise self._failed("a reaction failed", exc) from exc

    async def draft(self, chat_id: str, thread_id: str | None, text: str, *, draft_id: int) -> None:
        """A reply as it is written, as a native draft (`streaming: native`, private chats):
        the app animates it, and it is gone once the answer is sent."""
        try:
            await self.bot.send_message_draft(
                chat_id=int(chat_id),
                draft_id=draft_id,
                text=text,
                message_thread_id=int(thread_id) if thread_id else None,
                api_kwargs={"can_stop": True},  # the app's stop button: see _stopped
            )
        except RetryAfter as exc:
            raise Throttled(_seconds(exc)) from exc
        except TelegramError as exc:
            raise self._failed("a draft failed", exc) from exc

    async def _send_file(
        self, message: Outbound, attachment: Attachment, params: dict[str, Any]
    ) -> None:
        """A voice note as a voice message, a photo where Telegram shows one inline (JPEG, PNG,
        WebP up to 10 MB), else a document under its own name; the text is the caption."""
        data = await file_bytes(self.media, message)
        if isinstance(data, Outbound):
            await self.bot.send_message(chat_id=int(message.chat_id), text=data.text)
            return
        chat = int(message.chat_id)
        caption = message.text or None
        if attachment.voice:  # a voice message: the app plays it with its waveform
            duration = max(1, round(attachment.duration))
            await self.bot.send_voice(
                chat_id=chat,
                voice=data,
                duration=duration,
                caption=caption,
                filename=attachment.name or "voice.ogg",
                **params,
            )
        elif attachment.media_type in _PHOTO_TYPES and len(data) <= MAX_PHOTO_BYTES:
            await self.bot.send_photo(chat_id=chat, photo=data, caption=caption, **params)
        else:
            await self.bot.send_document(
                chat_id=chat,
                document=data,
                filename=attachment.name or "file",
                caption=caption,
                **params,
            )

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        try:
            await self.bot.send_chat_action(
                chat_id=int(chat_id),
                action="typing",
                message_thread_id=int(thread_id) if thread_id else None,
            )
        except TelegramError as exc:
            raise self._failed("typing failed", exc) from exc

    async def check(self) -> str:
        """One harmless call (getMe) proving the token works; returns the bot's handle."""
        try:
            await self.bot.initialize()  # calls getMe
            return f"@{self.bot.bot.username}"
        except TelegramError as exc:
            raise self._failed("cannot reach the Bot API", exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        try:
            await self.bot.shutdown()
        except TelegramError:
            pass
        for request in self._requests:  # also after a failed start, which shutdown() skips
            await request.shutdown()


@dataclass(kw_only=True, slots=True, frozen=True)
class _File:
    """A file a message carries, as the update describes it (checked), not downloaded."""

    file_id: str
    """What getFile downloads it by."""
    name: str
    """Its own name, or one made from the message id (photo_7.jpg)."""
    media_type: str
    """As Telegram reports it (empty if it does not)."""
    size: int | None
    """As Telegram reports it (None if it does not)."""
    voice: float | None = None
    """A voice note's length in seconds; None for any other file."""


@dataclass(kw_only=True, slots=True, frozen=True)
class _Read:
    """An update as the adapter read it, before it is taken."""

    update_id: int
    """What acknowledges it (the next poll's offset passes it)."""
    update: Any
    """The SDK's Update; None when it could not be parsed or read (recorded as failed)."""
    inbound: Inbound | None = None
    """Its message, checked; None for an update that brings none (an edit, a bot's)."""
    files: list[_File] = field(default_factory=list)
    """The files its message carries, when files are taken in."""


def _files(message: Any) -> list[_File]:
    """Each file a message carries: the largest size of a photo, a document, a voice note
    or an audio file (Unreadable if one is described with fields of the wrong type)."""
    n = integer_id(message.message_id, "message id")
    found: list[_File] = []
    if message.photo:
        largest = message.photo[-1]
        found.append(_file(largest, f"photo_{n}.jpg", "image/jpeg"))
    if message.document is not None:
        d = message.document
        found.append(_file(d, text(d.file_name, "file name") or f"file_{n}", d.mime_type))
    if message.voice is not None:
        v = message.voice
        seconds = _seconds_of(v.duration)
        found.append(_file(v, f"voice_{n}.ogg", v.mime_type or "audio/ogg", voice=seconds))
    if message.audio is not None:
        a = message.audio
        name = text(a.file_name, "file name") or f"audio_{n}"
        found.append(_file(a, name, a.mime_type or "audio/mpeg"))
    return found


def _file(described: Any, name: str, media_type: Any, *, voice: float | None = None) -> _File:
    size = described.file_size
    if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
        raise Unreadable(f"file size is {type(size).__name__}, not an integer")
    return _File(
        file_id=ident(described.file_id, "file id"),
        name=name,
        media_type=text(media_type, "media type"),
        size=size,
        voice=voice,
    )


def _seconds_of(duration: Any) -> float:
    """A voice note's length: the SDK gives a timedelta (or, in older versions, seconds)."""
    if isinstance(duration, datetime.timedelta):
        return duration.total_seconds()
    return number(duration or 0, "voice note length")


def _seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the int form is deprecated; both are handled here
        value = exc.retry_after
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)


def _index(text: str, units: int) -> int:
    """The index in `text` of the place `units` UTF-16 code units from its start."""
    index = 0
    while index < len(text) and units > 0:
        units -= utf16_len(text[index])
        index += 1
    return index


def _chat_of(read: _Read) -> str | None:
    """The chat an update's message belongs to (None for one that brings no message)."""
    return read.inbound.chat_id if read.inbound is not None else None


def _stopped_chat(stopped: Any) -> int | None:
    """The chat of a pressed stop button (the update's `stopped_message_generation`)."""
    chat = stopped.get("chat") if isinstance(stopped, dict) else None
    if not isinstance(chat, dict) or not isinstance(chat.get("id"), int):
        return None
    return int(chat["id"])
