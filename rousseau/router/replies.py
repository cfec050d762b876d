"""Reply composition: the one place that builds outbound messages. A reply is split under its
platform's limit, after the chat's reply header, its first parts replacing a streamed
preview; then come the files a turn sent, each with its caption. What is built goes to the
outbox in the step that finishes its inbound, and that transport's courier is woken."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from rousseau.agent import Attachment
from rousseau.delivery import Courier
from rousseau.messages import Inbound, Outbound
from rousseau.policy import ChatPolicy
from rousseau.state.protocol import DaemonStore
from rousseau.streaming import LEFTOVER
from rousseau.transports.base import Transport
from rousseau.transports.split import split_message

CHATS_KEPT = 10_000
"""Chats whose count of messages shown is kept (the least recently active dropped first)."""


class Replies:
    """Builds each reply's parts and queues them (see DaemonStore.finish)."""

    def __init__(
        self,
        *,
        state: DaemonStore,
        transports: Mapping[str, Transport],
        policies: Mapping[str, ChatPolicy],
        couriers: Mapping[str, Courier],
    ) -> None:
        self._state = state
        self._transports = transports
        self._policies = policies
        self._couriers = couriers
        """Each delivering transport's courier (the Router adds them as delivery starts)."""
        self._said: OrderedDict[tuple[str, str, str | None], int] = OrderedDict()
        """How many messages each chat (or thread) was shown so far, from either side: a
        preview with messages below it is no longer where a person looks for the answer."""

    def said(self, transport: str, chat_id: str, thread_id: str | None = None) -> int:
        """How many messages the chat was shown since this daemon started (see `spoke`)."""
        return self._said.get((transport, chat_id, thread_id), 0)

    def spoke(self, transport: str, chat_id: str, thread_id: str | None = None) -> None:
        """A message appeared in the chat (one taken in, or parts queued for it)."""
        key = (transport, chat_id, thread_id)
        self._said[key] = self._said.pop(key, 0) + 1
        if len(self._said) > CHATS_KEPT:
            self._said.popitem(last=False)

    async def reply(
        self,
        inbound: Inbound,
        text: str,
        *,
        finish: bool = True,
        error: str | None = None,
        files: Sequence[tuple[Attachment, str]] = (),
        notice: str = "",
        replaces: Sequence[str] = (),
        stale: bool = False,
        history: str | None = None,
    ) -> None:
        """Queue the reply, split for the platform, then any files the turn sent and a
        `notice` of its own, marking the inbound done (or failed, with `error`) in one step
        (with the queued writes of the `history` session, see DaemonState.finish).
        The first parts replace the messages in `replaces` (a streamed preview), one each;
        preview messages the reply does not need are edited to a mark. Where the preview is
        `stale` (other messages came below it), it is all edited to the mark and the reply
        is sent new, at the bottom: an edit far up the chat notifies nobody."""
        parts = self.parts(
            inbound.transport,
            inbound.chat_id,
            text,
            thread_id=inbound.thread_id,
            reply_to=inbound.message_id,
        )
        if stale:
            collapsed = [self._leftover(inbound, message_id) for message_id in replaces]
            parts = collapsed + parts
            replaces = ()
        for i, message_id in enumerate(replaces):
            if i < len(parts):
                parts[i] = dataclasses.replace(parts[i], replaces=message_id)
            else:
                parts.append(self._leftover(inbound, message_id))
        if notice:
            parts += self.parts(
                inbound.transport, inbound.chat_id, notice, thread_id=inbound.thread_id
            )
        parts += _file_parts(inbound.transport, inbound.chat_id, files, inbound.thread_id)
        await self._state.finish(inbound if finish else None, parts, error=error, history=history)
        if parts:
            self.spoke(inbound.transport, inbound.chat_id, inbound.thread_id)
            self.wake(inbound.transport)

    @staticmethod
    def _leftover(inbound: Inbound, message_id: str) -> Outbound:
        """A preview message the answer does not take over, edited to a mark."""
        return Outbound(
            transport=inbound.transport,
            chat_id=inbound.chat_id,
            thread_id=inbound.thread_id,
            text=LEFTOVER,
            replaces=message_id,
        )

    async def notify(
        self,
        transport: str,
        chat_id: str,
        text: str,
        buttons: tuple[str, ...] = (),
        *,
        files: Sequence[tuple[Attachment, str]] = (),
        thread_id: str | None = None,
    ) -> int:
        """Queue a message that answers nobody (see Router.notify); returns how many parts."""
        parts = self.parts(transport, chat_id, text, thread_id=thread_id)
        if parts and buttons:  # on the last part, under the whole text
            parts[-1] = dataclasses.replace(parts[-1], buttons=buttons)
        parts += _file_parts(transport, chat_id, files, thread_id)
        await self._state.finish(None, parts)
        if parts:
            self.spoke(transport, chat_id)
            self.wake(transport)
        return len(parts)

    def parts(
        self,
        name: str,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> list[Outbound]:
        """`text` after the chat's reply header, one part per piece the platform takes."""
        if not text:
            return []
        transport = self._transports.get(name)
        policy = self._policies.get(name, ChatPolicy())
        body = f"{policy.reply_header}{text}" if policy.reply_header else text
        limit = transport.max_length if transport is not None else 4096
        measure = transport.measure if transport is not None else len
        return [
            Outbound(
                transport=name,
                chat_id=chat_id,
                thread_id=thread_id,
                reply_to=reply_to,
                text=part,
            )
            for part in split_message(body, limit, measure)
        ]

    def wake(self, transport: str) -> None:
        """Tell the transport's courier that its outbox has something new."""
        courier = self._couriers.get(transport)
        if courier is not None:
            courier.wake()


def _file_parts(
    transport: str,
    chat_id: str,
    files: Sequence[tuple[Attachment, str]],
    thread_id: str | None = None,
) -> list[Outbound]:
    """One part per file to send, its caption the part's text."""
    return [
        Outbound(
            transport=transport,
            chat_id=chat_id,
            thread_id=thread_id,
            text=caption,
            attachment=attachment,
        )
        for attachment, caption in files
    ]
