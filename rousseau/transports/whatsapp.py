"""WhatsApp through neonize (whatsmeow): pairing by QR code, normalised JIDs, groups on mention.

The neonize client sits behind `WhatsAppClient`, a small interface that delivers neonize's own
event objects; tests drive the adapter with a fake client emitting the same objects.
A logged-out session stops retrying (it needs `rousseau whatsapp login` again); a dropped
connection is retried with backoff.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, StoreError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.base import describe, file_bytes, take_files
from rousseau.transports.unreadable import checked, refuse

try:
    from neonize.aioze.events import ConnectedEv, DisconnectedEv, LoggedOutEv, MessageEv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the whatsapp transport", "whatsapp") from exc

log = structlog.get_logger("rousseau.whatsapp")

MAX_LENGTH = 4000
USER_SERVER = "s.whatsapp.net"
LID_SERVER = "lid"
GROUP_SERVER = "g.us"
MAX_FILE_BYTES = 100_000_000
"""WhatsApp's limit on a document (images are recompressed by the app, not by us)."""
_IMAGES = frozenset({"image/jpeg", "image/png", "image/webp"})
"""What WhatsApp shows inline; other images go as documents."""
_MEDIA = ("imageMessage", "documentMessage", "audioMessage", "videoMessage")
_EXTENSIONS = {"imageMessage": "jpg", "audioMessage": "ogg", "videoMessage": "mp4"}

EventHandler = Callable[[Any], Awaitable[None]]


class LoggedOut(TransportAuthError):
    """WhatsApp ended the linked session; only pairing again helps."""


class WhatsAppClient(Protocol):
    """What the adapter needs of neonize."""

    def on_event(self, handler: EventHandler) -> None: ...

    async def connect(self) -> None: ...

    async def disconnect(self) -> None: ...

    async def send_text(self, jid: str, text: str) -> str:
        """Send a text; return the message id (to recognise its echo)."""
        ...

    async def send_file(
        self, jid: str, data: bytes, *, media_type: str, name: str, caption: str, image: bool
    ) -> str:
        """Upload a file and send it, as an image shown inline or as a document; return the
        message id."""
        ...

    async def send_voice(self, jid: str, data: bytes, *, seconds: int, waveform: bytes) -> str:
        """Upload OGG/Opus audio and send it as a voice message (push to talk: the app shows
        its waveform and a play button); return the message id."""
        ...

    async def download(self, message: Any) -> bytes:
        """The file a received message carries, fetched and decrypted."""
        ...

    async def typing(self, jid: str, on: bool) -> None: ...

    def own_jids(self) -> set[str]:
        """The account's own user parts (phone and LID), once connected."""
        ...

    async def check(self) -> str:
        """Which account the session belongs to, without connecting; raises
        TransportAuthError when no device is paired."""
        ...


def jid_parts(jid: Any) -> tuple[str, str]:
    """(user, server) of a neonize JID, device suffix dropped."""
    user = str(getattr(jid, "User", "") or "")
    return user.split(":")[0], str(getattr(jid, "Server", "") or "")


class WhatsAppTransport:
    name = "whatsapp"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(self, client: WhatsAppClient) -> None:
        self.client = client
        self.state: KeyValue = MemoryKeyValue()
        self._connected = False
        self._logged_out = False
        self._failure: Exception | None = None
        self._changed = anyio.Event()
        self._handler: InboundHandler | None = None
        self._sent_ids: OrderedDict[str, None] = OrderedDict()
        self.media: MediaIntake | None = None
        client.on_event(self._on_event)

    def bind_state(self, state: KeyValue) -> None:
        """Where the LID-to-phone map is kept."""
        self.state = state

    def bind_media(self, media: MediaIntake) -> None:
        """Take images, documents, audio and voice notes in (unbound, only the text)."""
        self.media = media

    @property
    def connected(self) -> bool:
        return self._connected

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._handler, self._failure = handler, None
        if self._logged_out:
            raise _logged_out("this device was logged out")
        try:
            try:
                await self.client.connect()
            except TransportError:
                raise
            except Exception as exc:  # neonize's own errors, whatever whatsmeow reports
                raise TransportError(f"whatsapp: cannot connect ({describe(exc)})") from exc
            with anyio.move_on_after(60):
                while not self._connected and self._failure is None:
                    await self._wait_change()
            if self._failure is not None:
                raise self._failure
            if not self._connected:
                raise TransportError("whatsapp: not connected after 60 s")
            task_status.started()
            while self._failure is None:
                await self._wait_change()
            if not isinstance(self._failure, _Stopped):
                raise self._failure
        finally:
            self._connected = False
            with anyio.CancelScope(shield=True):
                await self.client.disconnect()

    async def _wait_change(self) -> None:
        self._changed = anyio.Event()
        await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()

    async def stop(self) -> None:
        self._failure = self._failure or _Stopped()
        self._signal()

    async def _on_event(self, event: Any) -> None:
        if isinstance(event, ConnectedEv):
            self._connected = True
            log.info("whatsapp.connected")
        elif isinstance(event, LoggedOutEv):
            self._logged_out = True
            self._connected = False
            self._failure = _logged_out("the phone logged this device out")
            log.error("whatsapp.logged_out", hint="run: rousseau whatsapp login")
        elif isinstance(event, DisconnectedEv):
            self._connected = False
            self._failure = TransportError("whatsapp: disconnected")
        elif isinstance(event, MessageEv) and self._handler is not None:
            read = await self._read(event)
            if read is not None:
                inbound, files = read
                inbound = await take_files(inbound, self.media, files, unavailable=(_Gone,))
                await self._handler(inbound)
            return
        self._signal()

    async def _read(self, event: Any) -> tuple[Inbound, list[Incoming]] | None:
        """A message as the router takes it, checked, with its file; None for one not to
        answer, or one that cannot be read (recorded as failed). Raises only when the store
        (where a sender's phone number is learned) failed: that is not the event's fault."""
        try:
            inbound = await self._normalise(event)
            return None if inbound is None else (checked(inbound), self._files(event.Message))
        except StoreError:
            raise
        except Exception as exc:
            refuse(self, exc, message=str(getattr(getattr(event, "Info", None), "ID", "")))
            return None

    async def _phone(self, jid: Any, alt: Any = None) -> str:
        """The phone-number user part of a sender, mapping a LID through what was learned."""
        user, server = jid_parts(jid)
        alt_user, alt_server = jid_parts(alt) if alt is not None else ("", "")
        if server == LID_SERVER:
            if alt_user and alt_server == USER_SERVER:
                await self.state.set(f"lid:{user}", alt_user)  # the event carried both
                return alt_user
            return await self.state.get(f"lid:{user}") or user
        if alt_user and alt_server == LID_SERVER:
            await self.state.set(f"lid:{alt_user}", user)
        return user

    async def _normalise(self, event: Any) -> Inbound | None:
        info = event.Info
        source = info.MessageSource
        if info.ID in self._sent_ids:
            return None  # the echo of what we sent
        message = _unwrapped(event.Message)
        media = _media_of(message)
        text = message.conversation or message.extendedTextMessage.text
        if media is not None:
            text = media.caption if media.DESCRIPTOR.fields_by_name.get("caption") else ""
        if not text and (media is None or self.media is None):
            return None
        chat_user, chat_server = jid_parts(source.Chat)
        sender = await self._phone(source.Sender, source.SenderAlt)
        own = self.client.own_jids()
        if source.IsFromMe:
            # Only "message yourself" counts: the account writing to its own chat.
            if source.IsGroup or chat_user not in own:
                return None
        is_group = bool(source.IsGroup) or chat_server == GROUP_SERVER
        context = (media if media is not None else message.extendedTextMessage).contextInfo
        mentioned = any(jid_parts_str(m)[0] in own for m in context.mentionedJID) or (
            bool(context.participant) and jid_parts_str(context.participant)[0] in own
        )
        chat = f"{chat_user}@{chat_server}" if is_group else f"{sender}@{USER_SERVER}"
        return Inbound(
            transport=self.name,
            chat_id=chat,
            sender_id=sender,
            message_id=str(info.ID),
            text=str(text),
            is_group=is_group,
            mentioned=mentioned,
            sender_name=str(info.Pushname or ""),
            at=float(info.Timestamp or 0) / (1000 if info.Timestamp > 10**11 else 1),
        )

    def _files(self, message: Any) -> list[Incoming]:
        """The file a message carries (WhatsApp sends one per message); a push-to-talk
        audio is a voice note."""
        message = _unwrapped(message)
        media = _media_of(message)
        if media is None:
            return []
        kind = media.DESCRIPTOR.name[0].lower() + media.DESCRIPTOR.name[1:]
        is_audio = kind == "audioMessage"
        name = getattr(media, "fileName", "") if kind == "documentMessage" else ""
        return [
            Incoming(
                name=name or f"{kind.removesuffix('Message')}.{_EXTENSIONS.get(kind, 'bin')}",
                media_type=media.mimetype,
                size=int(media.fileLength) or None,
                fetch=functools.partial(self._download, message),
                voice=is_audio and bool(media.PTT),
                duration=float(media.seconds) if is_audio and media.seconds else None,
            )
        ]

    async def _download(self, message: Any, into: Download) -> None:
        """neonize gives a file whole (downloaded and decrypted by its Go library), never as
        a stream: bounded only by the declared length checked first (see MediaIntake.take)
        and by the download's limit on the bytes it gives."""
        try:
            data = await self.client.download(message)
        except Exception as exc:  # neonize's DownloadError and kin: gone from WhatsApp
            raise _Gone(describe(exc)) from exc
        await into.write(data)

    async def send(self, message: Outbound) -> None:
        try:
            if message.attachment is not None:
                data = await file_bytes(self.media, message)
                if isinstance(data, Outbound):
                    sent_id = await self.client.send_text(message.chat_id, data.text)
                elif message.attachment.voice:
                    sent_id = await self.client.send_voice(
                        message.chat_id,
                        data,
                        seconds=max(1, round(message.attachment.duration)),
                        waveform=message.attachment.waveform,
                    )
                else:
                    sent_id = await self.client.send_file(
                        message.chat_id,
                        data,
                        media_type=message.attachment.media_type,
                        name=message.attachment.name or "file",
                        caption=message.text,
                        image=message.attachment.media_type in _IMAGES,
                    )
            else:
                sent_id = await self.client.send_text(message.chat_id, message.text)
        except Exception as exc:  # neonize's own errors, whatever whatsmeow reports
            raise TransportError(f"whatsapp: sending failed ({describe(exc)})") from exc
        self._sent_ids[sent_id] = None
        while len(self._sent_ids) > 1000:
            self._sent_ids.popitem(last=False)
        try:
            await self.client.typing(message.chat_id, False)
        except Exception as exc:  # typing off is a courtesy
            log.debug("whatsapp.typing_failed", error=str(exc))

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        try:
            await self.client.typing(chat_id, True)
        except Exception as exc:  # neonize's own errors, whatever whatsmeow reports
            raise TransportError(f"whatsapp: typing failed ({describe(exc)})") from exc

    async def check(self) -> str:
        """The paired account, read from the session store: connecting a second time would
        take the link over from a running daemon."""
        return await self.client.check()

    async def aclose(self) -> None:
        """The client disconnects when `run` ends; nothing else is held."""


class _Gone(Exception):
    """A file WhatsApp will no longer give (expired from its servers, or undecryptable)."""


def _unwrapped(message: Any) -> Any:
    """The message inside WhatsApp's wrappers (a document with a caption comes wrapped)."""
    if message.HasField("documentWithCaptionMessage"):
        return message.documentWithCaptionMessage.message
    return message


def _media_of(message: Any) -> Any:
    """The image, document, audio or video part of a message, if it has one."""
    for field in _MEDIA:
        if message.HasField(field):
            return getattr(message, field)
    return None


def _logged_out(why: str) -> LoggedOut:
    return LoggedOut(f"whatsapp.store: {why}; pair it with `rousseau whatsapp login`")


def paired_device(store: str) -> str | None:
    """The JID of the device paired in a neonize session store (whatsmeow's SQLite schema),
    or None while nothing is paired. Opens the file read-only and never creates it."""
    path = Path(store).expanduser()
    if not path.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as db:
            row = db.execute("SELECT jid FROM whatsmeow_device LIMIT 1").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise TransportError(f"whatsapp: cannot read the session store {path} ({exc})") from exc
    except sqlite3.DatabaseError as exc:
        raise TransportError(f"whatsapp: {path} is not a session store ({exc})") from exc
    return str(row[0]) if row else None


def paired_phone(store: str) -> str | None:
    """The phone number (digits, as senders are named) of the account paired in `store`."""
    jid = paired_device(store)
    return None if jid is None else jid_parts_str(jid)[0].split(".")[0]


def jid_parts_str(jid: str) -> tuple[str, str]:
    """(user, server) of a JID string such as 15551234567:3@s.whatsapp.net."""
    user, _, server = jid.partition("@")
    return user.split(":")[0], server


class _Stopped(Exception):
    """Raised inside run() to leave it when stop() was asked for."""


class NeonizeClient:
    """The real client: neonize's NewAClient, its session kept in `store` (a SQLite file)."""

    def __init__(self, store: str) -> None:
        from neonize.aioze.client import NewAClient

        self.store = store
        self._client = NewAClient(store)
        self._handlers: list[EventHandler] = []
        self._me: Any = None
        for kind in (ConnectedEv, DisconnectedEv, LoggedOutEv, MessageEv):
            self._client.event(kind)(self._dispatch)

    async def _dispatch(self, _: Any, event: Any) -> None:
        if isinstance(event, ConnectedEv):
            self._me = await self._client.get_me()
        for handler in self._handlers:
            await handler(event)

    def on_event(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    async def connect(self) -> None:
        await self._client.connect()

    async def disconnect(self) -> None:
        await self._client.disconnect()

    async def send_text(self, jid: str, text: str) -> str:
        from neonize.utils.jid import build_jid

        user, server = jid_parts_str(jid)
        response = await self._client.send_message(build_jid(user, server), text)
        return str(response.ID)

    async def send_file(
        self, jid: str, data: bytes, *, media_type: str, name: str, caption: str, image: bool
    ) -> str:
        """Uploaded, then sent as an image or a document message built here: neonize's own
        builders decode the image for a thumbnail, and nothing is rendered on this host."""
        from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import (
            DocumentMessage,
            ImageMessage,
            Message,
        )
        from neonize.utils.enum import MediaType
        from neonize.utils.jid import build_jid

        upload = await self._client.upload(
            data, MediaType.MediaImage if image else MediaType.MediaDocument
        )
        common: dict[str, Any] = {
            "URL": upload.url,
            "directPath": upload.DirectPath,
            "fileEncSHA256": upload.FileEncSHA256,
            "fileLength": upload.FileLength,
            "fileSHA256": upload.FileSHA256,
            "mediaKey": upload.MediaKey,
            "mimetype": media_type,
            "caption": caption or None,
        }
        if image:
            message = Message(imageMessage=ImageMessage(**common))
        else:
            message = Message(documentMessage=DocumentMessage(**common, fileName=name, title=name))
        user, server = jid_parts_str(jid)
        response = await self._client.send_message(build_jid(user, server), message)
        return str(response.ID)

    async def send_voice(self, jid: str, data: bytes, *, seconds: int, waveform: bytes) -> str:
        """Built here as the image and document messages are: neonize's own builder runs
        ffmpeg for the length, which the note already knows."""
        from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import AudioMessage, Message
        from neonize.utils.enum import MediaType
        from neonize.utils.jid import build_jid

        upload = await self._client.upload(data, MediaType.MediaAudio)
        audio = AudioMessage(
            URL=upload.url,
            directPath=upload.DirectPath,
            fileEncSHA256=upload.FileEncSHA256,
            fileLength=upload.FileLength,
            fileSHA256=upload.FileSHA256,
            mediaKey=upload.MediaKey,
            mimetype="audio/ogg; codecs=opus",
            seconds=seconds,
            PTT=True,
            waveform=waveform,
        )
        user, server = jid_parts_str(jid)
        response = await self._client.send_message(
            build_jid(user, server), Message(audioMessage=audio)
        )
        return str(response.ID)

    async def download(self, message: Any) -> bytes:
        data = await self._client.download_any(message)
        if data is None:
            raise TransportError("whatsapp: the file is not available")
        return bytes(data)

    async def typing(self, jid: str, on: bool) -> None:
        from neonize.utils.enum import ChatPresence, ChatPresenceMedia
        from neonize.utils.jid import build_jid

        user, server = jid_parts_str(jid)
        state = ChatPresence.CHAT_PRESENCE_COMPOSING if on else ChatPresence.CHAT_PRESENCE_PAUSED
        await self._client.send_chat_presence(
            build_jid(user, server), state, ChatPresenceMedia.CHAT_PRESENCE_MEDIA_TEXT
        )

    def own_jids(self) -> set[str]:
        out: set[str] = set()
        for attr in ("JID", "LID"):
            jid = getattr(self._me, attr, None)
            if jid is not None:
                out.add(jid_parts(jid)[0])
        return out

    async def check(self) -> str:
        phone = await anyio.to_thread.run_sync(paired_phone, self.store)
        if phone is None:
            raise _logged_out(f"no device is paired in {self.store}")
        return f"+{phone} (paired in {self.store})"


async def login(store: str) -> None:
    """Pair this device: neonize prints the QR code in the terminal; returns once paired."""
    from neonize.aioze.client import NewAClient

    client = NewAClient(store)
    paired = anyio.Event()

    async def connected(_: Any, event: Any) -> None:
        paired.set()

    client.event(ConnectedEv)(connected)
    await client.connect()
    try:
        with anyio.fail_after(300):
            await paired.wait()
    finally:
        await client.disconnect()
