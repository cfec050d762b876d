"""A stand-in for the neonize client: it emits neonize's own event objects (the protobuf
messages whatsmeow sends up) and records what the adapter sends."""

from __future__ import annotations

import hashlib
import itertools
import time
from typing import Any

import anyio
from neonize.aioze.events import ConnectedEv, DisconnectedEv, LoggedOutEv, MessageEv

from rousseau.transports.whatsapp import EventHandler
from tests.fakes.files import Declared, stated

OWN_PHONE = "15550000000"
OWN_LID = "900000000000001"


class FakeWhatsAppClient:
    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []
        self.sent: list[tuple[str, str]] = []
        self.sent_files: list[dict[str, Any]] = []
        self.files: dict[bytes, bytes] = {}
        """What the phone's contacts sent, by the fileSHA256 their messages carry."""
        self.sent_ids: list[str] = []
        self.presence: list[tuple[str, bool]] = []
        self.connects = 0
        self.fail_connect: Exception | None = None
        self._ids = itertools.count(1)

    # -- the interface --------------------------------------------------------------------

    def on_event(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    async def connect(self) -> None:
        self.connects += 1
        if self.fail_connect is not None:
            raise self.fail_connect
        await self.emit(ConnectedEv())

    async def disconnect(self) -> None:
        pass

    async def send_text(self, jid: str, text: str) -> str:
        message_id = f"OUT{next(self._ids)}"
        self.sent.append((jid, text))
        self.sent_ids.append(message_id)
        return message_id

    async def send_file(
        self, jid: str, data: bytes, *, media_type: str, name: str, caption: str, image: bool
    ) -> str:
        message_id = f"OUT{next(self._ids)}"
        self.sent_files.append(
            {
                "jid": jid,
                "data": data,
                "media_type": media_type,
                "name": name,
                "caption": caption,
                "image": image,
            }
        )
        self.sent_ids.append(message_id)
        return message_id

    async def send_voice(self, jid: str, data: bytes, *, seconds: int, waveform: bytes) -> str:
        message_id = f"OUT{next(self._ids)}"
        self.sent_files.append(
            {
                "jid": jid,
                "data": data,
                "media_type": "audio/ogg; codecs=opus",
                "name": "voice.ogg",
                "caption": "",
                "image": False,
                "ptt": True,
                "seconds": seconds,
                "waveform": waveform,
            }
        )
        self.sent_ids.append(message_id)
        return message_id

    async def download(self, message: Any) -> bytes:
        for field in ("imageMessage", "documentMessage", "audioMessage", "videoMessage"):
            if message.HasField(field):
                return self.files[getattr(message, field).fileSHA256]
        raise ValueError("no media in this message")

    async def typing(self, jid: str, on: bool) -> None:
        self.presence.append((jid, on))

    def own_jids(self) -> set[str]:
        return {OWN_PHONE, OWN_LID}

    async def check(self) -> str:
        return f"+{OWN_PHONE}"

    # -- what tests do --------------------------------------------------------------------

    async def emit(self, event: Any) -> None:
        for handler in self.handlers:
            await handler(event)

    def message(
        self,
        text: str,
        *,
        sender: str = "15551230001",
        sender_server: str = "s.whatsapp.net",
        sender_alt: tuple[str, str] | None = None,
        device: int = 0,
        chat: tuple[str, str] | None = None,
        from_me: bool = False,
        mentions: list[str] | None = None,
        extended: bool = False,
        message_id: str | None = None,
        file: tuple[str, str, bytes] | None = None,
        voice_seconds: int = 0,
        declared: Declared = ...,
    ) -> MessageEv:
        """A message as whatsmeow hands it up; `file` (name, media type, bytes) makes it an
        image, a document (wrapped, as WhatsApp wraps one with a caption) or an audio
        message (push-to-talk when `voice_seconds`), `text` its caption, its fileLength the
        `declared` size (unset, 0, for None)."""
        ev = MessageEv()
        ev.Info.ID = message_id or f"IN{next(self._ids)}"
        ev.Info.Timestamp = int(time.time())
        ev.Info.Pushname = "Ann"
        src = ev.Info.MessageSource
        src.Sender.User = f"{sender}:{device}" if device else sender
        src.Sender.Server = sender_server
        if sender_alt is not None:
            src.SenderAlt.User, src.SenderAlt.Server = sender_alt
        chat_user, chat_server = chat or (sender, sender_server)
        src.Chat.User, src.Chat.Server = chat_user, chat_server
        src.IsGroup = chat_server == "g.us"
        src.IsFromMe = from_me
        if file is not None:
            name, media_type, data = file
            digest = hashlib.sha256(data).digest()
            self.files[digest] = data
            if media_type.startswith("image/"):
                media: Any = ev.Message.imageMessage
                media.caption = text
            elif media_type.startswith("audio/"):
                media = ev.Message.audioMessage
                media.PTT = bool(voice_seconds)
                media.seconds = voice_seconds
            else:
                media = ev.Message.documentWithCaptionMessage.message.documentMessage
                media.fileName, media.caption = name, text
            media.mimetype = media_type
            media.fileLength = stated(data, declared) or 0
            media.fileSHA256 = digest
        elif extended or mentions:
            ev.Message.extendedTextMessage.text = text
            for m in mentions or []:
                ev.Message.extendedTextMessage.contextInfo.mentionedJID.append(m)
        else:
            ev.Message.conversation = text
        return ev

    def deliver(self, event: Any) -> None:
        """From a plain thread: hand an event to the adapter on the test's loop."""
        anyio.from_thread.run(self.emit, event)

    def logged_out(self) -> None:
        self.deliver(LoggedOutEv())

    def disconnected(self) -> None:
        self.deliver(DisconnectedEv())
