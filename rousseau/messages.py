"""The records every part of rousseau exchanges: what a person sent (`Inbound`), one part of a
reply (`Outbound`), the turn's context (which message it answers, which files it sends), and a
transport's small durable state.

No part owns them: transports make them, the router and the store pass them on, tools read the
turn's context. This module imports only the agent core, so anyone may import it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from rousseau.agent import Attachment

__all__ = [
    "DEFAULT_AGENT",
    "LOCAL_USER",
    "Inbound",
    "InboundHandler",
    "KeyValue",
    "MemoryKeyValue",
    "Outbound",
    "OutgoingFiles",
    "current_inbound",
    "outgoing_files",
    "person_of_turn",
    "turn_person",
    "turn_status",
]

DEFAULT_AGENT = "default"
"""The agent of the top-level `agent:` section, and of every session before agents existed."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Inbound:
    """One message from a person, normalised by its adapter."""

    transport: str
    chat_id: str
    sender_id: str
    message_id: str
    """The platform's own stable id (unique within the transport), used to drop duplicates."""
    text: str
    is_group: bool = False
    mentioned: bool = False
    """In a group: the bot was mentioned or replied to."""
    thread_id: str | None = None
    """Where the platform has threads: the thread to answer in."""
    sender_name: str = ""
    at: float = field(default_factory=time.time)
    attachments: tuple[Attachment, ...] = ()
    """Files it carried, already stored (and copied to the workspace) by the adapter."""
    refusal: str = ""
    """Set when its files were refused (too large): the reply the sender gets instead of an
    answer, with no model call. (A file of a type not taken in is named in the text.)"""
    agent: str = DEFAULT_AGENT
    """The agent that answers it, as the router's routes decide (see rousseau.agents)."""

    @property
    def session_key(self) -> str:
        """Which conversation this belongs to: `transport:chat_id`, plus the thread if any,
        plus `@agent` for an agent but the default (each agent has its own sessions)."""
        key = f"{self.transport}:{self.chat_id}"
        key = f"{key}:{self.thread_id}" if self.thread_id else key
        return key if self.agent == DEFAULT_AGENT else f"{key}@{self.agent}"


@dataclass(kw_only=True, slots=True, frozen=True)
class Outbound:
    """One part of a reply, already under the platform's limit."""

    transport: str
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to: str | None = None
    """The inbound message id this answers, where the platform can quote it."""
    buttons: tuple[str, ...] = ()
    """Answers offered as buttons where the platform has them; pressing one arrives as an
    ordinary message with that text from whoever pressed it (the text itself says how to
    answer where there are no buttons)."""
    attachment: Attachment | None = None
    """A file to send, `text` being its caption (only to transports with `max_file_bytes`)."""
    replaces: str | None = None
    """The platform's id of a message to edit into this part instead of sending a new one:
    a preview shown while the reply was written (only to transports that stream)."""


current_inbound: ContextVar[Inbound | None] = ContextVar("current_inbound", default=None)
"""The message whose turn is running, for tools that act on "this chat" (the router sets it)."""

LOCAL_USER = "local"
"""The person at the terminal chat, as a profile names them (a sender is `transport:id`)."""

turn_person: ContextVar[str | None] = ContextVar("turn_person", default=None)
"""Whom a turn answers where it answers no message: the terminal chat sets LOCAL_USER;
unset (a cron job, a program's own turns), nobody."""


def person_of_turn() -> str | None:
    """Whose profile the running turn uses: the sender of the message it answers in a private
    chat (`transport:sender_id`), else `turn_person`. None: nobody's, in a group (whose
    members would all read it) and where no one is answered (cron)."""
    inbound = current_inbound.get()
    if inbound is not None:
        return None if inbound.is_group else f"{inbound.transport}:{inbound.sender_id}"
    return turn_person.get()


@dataclass(kw_only=True, slots=True)
class OutgoingFiles:
    """Files (with captions) a running turn asked to send to the chat its answer goes to;
    whoever runs the turn (the router, cron) queues them with the answer, in the same
    transaction, so each goes out exactly once."""

    transport: str
    files: list[tuple[Attachment, str]] = field(default_factory=list)
    keep: Callable[[Attachment, str], Awaitable[None]] | None = None
    """Where each file is also kept durably as it is added (the router keeps them with the
    inbound, for a turn that finishes just before a stop)."""

    async def add(self, attachment: Attachment, caption: str) -> None:
        if self.keep is not None:
            await self.keep(attachment, caption)
        self.files.append((attachment, caption))


outgoing_files: ContextVar[OutgoingFiles | None] = ContextVar("outgoing_files", default=None)
"""Set while a turn whose answer goes to a chat runs (see OutgoingFiles)."""

turn_status: ContextVar[Callable[[str], None] | None] = ContextVar("turn_status", default=None)
"""Where a running turn's progress line goes (its streamed preview's status), for work done
out of the model's sight (a sub-agent's steps); None where nothing shows it."""

InboundHandler = Callable[[Inbound], Awaitable[None]]
"""Takes an inbound message and returns once it is safely persisted (then the adapter acks)."""


class KeyValue(Protocol):
    """A transport's small durable state (login tokens, sync positions, identity maps);
    the daemon binds one kept in the store through the transport's `bind_state`."""

    async def get(self, key: str) -> str | None: ...

    async def set(self, key: str, value: str) -> None: ...


class MemoryKeyValue:
    """The stand-in until the daemon binds the store (and for library use without one)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def set(self, key: str, value: str) -> None:
        self.values[key] = value
