"""The web chat (and the OpenAI-compatible API) as transports like the others: a message
typed in the page goes through the router (policy, session, approvals, outbox), and what
the router sends or previews comes back to the page, or the API caller, as events.

A chat's events go to whoever listens to that chat at the moment; nothing is kept here.
The session is the history: a page opened later reads it from the store.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Literal

import anyio
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rousseau.media import Incoming, MediaIntake
from rousseau.messages import (
    DEFAULT_AGENT,
    Inbound,
    InboundHandler,
    KeyValue,
    MemoryKeyValue,
    Outbound,
)
from rousseau.transports.base import take_files
from rousseau.transports.unreadable import checked, repaired

log = structlog.get_logger("rousseau.web")

LISTENER_BUFFER = 256
"""Events waiting for one slow listener; past that it misses the oldest previews (the
final message is still in the session for a reload)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    kind: Literal["preview", "message", "typing"]
    id: str = ""
    """The message's id: a preview and the final message that replaces it share one."""
    text: str = ""
    reply_to: str | None = None
    """The message it answers (the final part of a reply), as the router gave it."""
    buttons: tuple[str, ...] = ()
    """Answers the page offers as buttons (an approval's `yes CODE` and `no CODE`)."""
    audio: str = ""
    """A voice note's address (`/chat/voice/SHA256`), which the page plays inline."""


VOICE_NOTES = 1000
"""Voice notes a web chat remembers it was sent (the ones its page may fetch), in all."""


class WebChat:
    """A transport whose chats are web pages (or API calls) of logged-in people."""

    measure = staticmethod(len)
    shares_connections = True
    """Where daemons share the state, every daemon serves its own pages and calls..."""
    replies_stay = True
    """...and sends their replies itself: the page waiting for one is connected here."""
    raw_previews = True
    """Previews carry the text as written: the page (or API caller) renders it."""

    def __init__(self, name: str = "web", max_length: int = 100_000) -> None:
        self.name = name
        self.max_length = max_length
        self.state: KeyValue = MemoryKeyValue()
        self._handler: InboundHandler | None = None
        self._media: MediaIntake | None = None
        self._stopped = anyio.Event()
        self._listeners: dict[str, set[MemoryObjectSendStream[Event]]] = {}
        self._voiced: OrderedDict[tuple[str, str], None] = OrderedDict()
        """(chat, sha256) of the voice notes sent to each chat, the oldest dropped first."""
        if name == "web":  # the page plays voice notes; an API caller reads text alone
            self.max_file_bytes = 20_000_000

    @property
    def connected(self) -> bool:
        return self._handler is not None

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._handler = handler
        self._stopped = anyio.Event()
        task_status.started()
        try:
            await self._stopped.wait()
        finally:
            self._handler = None

    async def stop(self) -> None:
        self._stopped.set()

    async def aclose(self) -> None:
        pass

    async def check(self) -> str:
        return self.name

    def bind_media(self, media: MediaIntake) -> None:
        self._media = media

    async def say(
        self,
        chat_id: str,
        sender_id: str,
        text: str,
        *,
        agent: str = DEFAULT_AGENT,
        files: Sequence[Incoming] = (),
    ) -> str:
        """A message typed by `sender_id` in `chat_id` (with any uploaded `files`, stored
        or refused under the media limits), handed to the router; its id once it is
        persisted. Its text is checked as every transport checks it (a lone surrogate in
        what a client posted is shown as U+FFFD). Raises RuntimeError while the transport
        is not running."""
        if self._handler is None:
            raise RuntimeError(f"{self.name}: not running")
        message_id = secrets.token_hex(8)
        inbound = checked(
            Inbound(
                transport=self.name,
                chat_id=chat_id,
                sender_id=sender_id,
                message_id=message_id,
                text=text,
                sender_name=sender_id,
                agent=agent,
            )
        )
        files = [replace(f, name=repaired(f.name)) for f in files]
        await self._handler(await take_files(inbound, self._media, files))
        return message_id

    @asynccontextmanager
    async def listen(self, chat_id: str) -> AsyncIterator[MemoryObjectReceiveStream[Event]]:
        """The chat's events while the block runs."""
        send, receive = anyio.create_memory_object_stream[Event](LISTENER_BUFFER)
        self._listeners.setdefault(chat_id, set()).add(send)
        try:
            async with receive:
                yield receive
        finally:
            listeners = self._listeners.get(chat_id, set())
            listeners.discard(send)
            if not listeners:
                self._listeners.pop(chat_id, None)
            send.close()

    def _publish(self, chat_id: str, event: Event) -> None:
        for send in list(self._listeners.get(chat_id, ())):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:  # a listener that stopped reading
                log.debug("web.listener_behind", chat=chat_id)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async def send(self, message: Outbound) -> None:
        text, audio = message.text, ""
        attachment = message.attachment
        if attachment is not None and attachment.voice:
            audio = f"/chat/voice/{attachment.sha256}"
            self._voiced[message.chat_id, attachment.sha256] = None
            while len(self._voiced) > VOICE_NOTES:
                self._voiced.popitem(last=False)
        elif attachment is not None:
            text = "\n".join(t for t in (text, attachment.stand_in()) if t)
        self._publish(
            message.chat_id,
            Event(
                kind="message",
                id=message.replaces or secrets.token_hex(8),
                text=text,
                reply_to=message.reply_to,
                buttons=message.buttons,
                audio=audio,
            ),
        )

    async def voice_note(self, chat_id: str, sha256: str) -> bytes | None:
        """A voice note sent to this chat (None for any other file, or one forgotten)."""
        if (chat_id, sha256) not in self._voiced or self._media is None:
            return None
        return await self._media.blobs.read(sha256)

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        shown = message_id or secrets.token_hex(8)
        self._publish(chat_id, Event(kind="preview", id=shown, text=text))
        return shown

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        self._publish(chat_id, Event(kind="typing"))
