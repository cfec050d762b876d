"""A stand-in for the neonize client: it emits neonize's own event objects (the protobuf
messages whatsmeow sends up) and records what the adapter sends."""

from __future__ import annotations

import itertools
import time
from typing import Any

import anyio
from neonize.aioze.events import ConnectedEv, DisconnectedEv, LoggedOutEv, MessageEv

from rousseau.transports.whatsapp import EventHandler

OWN_PHONE = "15550000000"
OWN_LID = "900000000000001"


class FakeWhatsAppClient:
    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []
        self.sent: list[tuple[str, str]] = []
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
    ) -> MessageEv:
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
        if extended or mentions:
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
