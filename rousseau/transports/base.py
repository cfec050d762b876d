"""What a transport is: it turns platform events into Inbound records and sends Outbound text."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar
from urllib.parse import quote

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import TransportError
from rousseau.media import Incoming, MediaIntake
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound

log = structlog.get_logger("rousseau.transports")
T = TypeVar("T")


class Throttled(Exception):
    """The platform asked to slow down: nothing more before `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"throttled for {retry_after:g} s")
        self.retry_after = retry_after

    @classmethod
    def asked(cls, headers: Mapping[str, str], *names: str) -> Throttled:
        """Throttled for as long as the answer's headers ask: the first of `names` (any
        case) that holds seconds; 1 s if none does."""
        lowered = {str(k).lower(): v for k, v in dict(headers).items()}
        for name in names:
            try:
                return cls(max(float(lowered.get(name.lower(), "")), 0.0))
            except ValueError:
                continue
        return cls(1.0)


async def take_files(
    inbound: Inbound,
    media: MediaIntake | None,
    files: Sequence[Incoming],
    *,
    unavailable: tuple[type[BaseException], ...] = (),
) -> Inbound:
    """The inbound with its files taken in: stored (or refused, the refusal kept for the
    sender), their notes added to its text. Nothing is fetched without a media intake, for
    a sender the chat policy does not let in, or for a message not meant for the bot. A
    download failing with one of `unavailable` is noted and the message still answered;
    any other failure propagates (the platform hands the message over again)."""
    if media is None or not files:
        return inbound
    if media.admits is not None and not await media.admits(inbound):
        return inbound
    try:
        taken = await media.take(files)
    except unavailable as exc:
        log.warning("media.file_unavailable", transport=inbound.transport, error=str(exc))
        note = "[a file was attached but could not be downloaded]"
        return replace(inbound, text=_lines(inbound.text, note))
    return replace(
        inbound,
        text=_lines(inbound.text, *taken.notes),
        attachments=taken.attachments,
        refusal=taken.refusal,
    )


async def take_by_chat(
    items: Sequence[T],
    chat_of: Callable[[T], Hashable],
    take: Callable[[T], Awaitable[None]],
) -> dict[int, Exception]:
    """Take what one receive brought: each chat's items in order, the chats side by side, so
    their messages are persisted in one commit, not in one commit and one wait on the
    database each. A chat takes nothing after its first failure. The failures, by index in
    `items`, are returned, not raised (that would cancel the other chats): the caller
    acknowledges nothing from the first of them on, and what other chats took after it comes
    back as duplicates, which the inbox drops."""
    chats: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        chats.setdefault(chat_of(item), []).append(i)
    failed: dict[int, Exception] = {}

    async def take_chat(taking: Sequence[int]) -> None:
        for i in taking:
            try:
                await take(items[i])
            except Exception as exc:
                failed[i] = exc
                return

    if len(chats) == 1:
        await take_chat(range(len(items)))
    elif chats:
        async with anyio.create_task_group() as tg:
            for taking in chats.values():
                tg.start_soon(take_chat, taking)
    return failed


async def file_bytes(media: MediaIntake | None, message: Outbound) -> bytes | Outbound:
    """The bytes of the file an outbound part carries, or, when they are gone from the blob
    store (pruned, or a store moved), the part as text saying so: a reply is never dropped
    silently."""
    assert message.attachment is not None
    data = await media.blobs.read(message.attachment.sha256) if media is not None else None
    if data is not None:
        return data
    note = f"{message.attachment.stand_in()} (the file is no longer stored)"
    return replace(message, text=_lines(message.text, note), attachment=None)


def _lines(*texts: str) -> str:
    return "\n".join(t for t in texts if t)


class Transport(Protocol):
    """A messaging platform adapter. The daemon supervises `run`; `send` delivers the outbox.

    Failures are `TransportError`s (retried with backoff); a credential the platform rejects
    is a `TransportAuthError` naming the config key to fix (the supervisor stops the
    transport). Neither ever carries the secret itself.

    A transport whose platform spreads events across several connections of one bot sets
    `shares_connections = True`: where daemons share the state it runs on every daemon;
    any other runs on the one daemon elected to poll it.
    """

    name: str
    max_length: int
    """The platform's message length limit, in `measure` units."""

    def measure(self, text: str) -> int:
        """How the platform counts a message's length."""
        ...

    @property
    def connected(self) -> bool: ...

    def bind_state(self, state: KeyValue) -> None:
        """Where to keep small durable state (the daemon binds one in the store before `run`);
        a no-op for a transport with nothing to keep."""
        ...

    async def run(
        self,
        handler: InboundHandler,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, call `task_status.started()` once connected, then feed `handler` until
        stopped or cancelled. Raises when the connection fails; the supervisor restarts it."""
        ...

    async def stop(self) -> None:
        """Stop taking new messages (a graceful `run` return)."""
        ...

    async def send(self, message: Outbound) -> None:
        """Deliver one part; raise on failure so the outbox retries."""
        ...

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        """Show that a reply is being written, where the platform can."""
        ...

    async def check(self) -> str:
        """One harmless call proving the credentials work (`rousseau doctor`); says who the
        transport is, as the platform knows it."""
        ...

    async def aclose(self) -> None:
        """Release what outlives `run` (HTTP sessions, clients); safe to call twice."""
        ...


def describe(error: BaseException | str, *secrets: str | None) -> str:
    """An SDK error as one line to put in a message, every secret masked: SDK texts sometimes
    quote the token, or a URL that carries it."""
    text = error if isinstance(error, str) else str(error) or type(error).__name__
    for secret in secrets:
        if secret:
            for form in (secret, quote(secret, safe="")):
                text = text.replace(form, "***")
    return " ".join(text.split())


class MemoryTransport:
    """An in-memory transport for tests and embedding: `inject` messages, read `sent`."""

    name: str
    max_length: int
    measure = staticmethod(len)

    def __init__(self, name: str = "memory", max_length: int = 4096) -> None:
        self.name = name
        self.max_length = max_length
        self.state: KeyValue = MemoryKeyValue()
        self.sent: list[Outbound] = []
        self.typing_in: list[str] = []
        self.fail_sends = 0
        """Fail this many sends before succeeding (to exercise outbox retries)."""
        self._handler: InboundHandler | None = None
        self._stopped = anyio.Event()
        self._connected = False
        self._ids = itertools.count(1)
        self._sent_event = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._connected

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    async def run(
        self,
        handler: InboundHandler,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        self._handler = handler
        self._stopped = anyio.Event()
        self._connected = True
        task_status.started()
        try:
            await self._stopped.wait()
        finally:
            self._connected = False

    async def stop(self) -> None:
        self._stopped.set()

    async def inject(
        self,
        text: str,
        *,
        chat_id: str = "chat",
        sender_id: str = "user",
        message_id: str | None = None,
        is_group: bool = False,
        mentioned: bool = False,
        thread_id: str | None = None,
    ) -> Inbound:
        """Deliver a message as the platform would; returns once the handler accepted it."""
        assert self._handler is not None, "the transport is not running"
        inbound = Inbound(
            transport=self.name,
            chat_id=chat_id,
            sender_id=sender_id,
            message_id=message_id or f"m{next(self._ids)}",
            text=text,
            is_group=is_group,
            mentioned=mentioned,
            thread_id=thread_id,
        )
        await self._handler(inbound)
        return inbound

    async def send(self, message: Outbound) -> None:
        if self.fail_sends > 0:
            self.fail_sends -= 1
            raise TransportError(f"{self.name}: simulated send failure")
        self.sent.append(message)
        self._sent_event.set()

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        self.typing_in.append(chat_id)

    async def check(self) -> str:
        return self.name

    async def aclose(self) -> None:
        pass

    async def wait_sent(self, count: int) -> list[Outbound]:
        """Wait until at least `count` parts were sent (bound it with fail_after); return all."""
        while len(self.sent) < count:
            self._sent_event = anyio.Event()
            if len(self.sent) >= count:
                break
            await self._sent_event.wait()
        return list(self.sent)
