"""The Router: inbound -> dedupe -> policy -> session -> agent -> outbox (DESIGN.md section 1).

Turns of one session run one at a time in arrival order; turns of different sessions run
concurrently up to `max_concurrent_turns`. Every inbound is persisted before the platform is
acknowledged, and its reply is queued in the same transaction that marks it done.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from rousseau.agent import Agent, Message, Session
from rousseau.approvals import ChatApprovals
from rousseau.metrics import Metrics
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState, OutboxRow
from rousseau.transports.base import Inbound, Outbound, Transport, current_inbound
from rousseau.transports.split import split_message

log = structlog.get_logger("rousseau.router")

HELP = (
    "I'm an assistant. Just write to me.\n"
    "/new or /reset: start a fresh conversation\n"
    "/help: this message"
)
FAILED_REPLY = (
    "Sorry, I couldn't answer that just now (the model did not respond). "
    "Your message is kept; please try again in a moment."
)
PAIRING_TTL = 3600.0
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
TYPING_EVERY = 4.0
TYPING_AFTER = 0.5  # a reply faster than this needs no typing indicator
DELIVERY_BATCH = 200
DELIVERY_CHATS = 32  # chats whose replies are sent at once; order holds within each chat


class ShuttingDown(Exception):
    """The daemon is stopping; the adapter must not acknowledge this message."""


@dataclass(kw_only=True, slots=True)
class ChatPolicy:
    """Who may talk to the agent on one transport, and how it answers there."""

    policy: str = "allowlist"
    allowlist: frozenset[str] = frozenset()
    require_mention: bool = True
    reply_header: str = ""


class RateLimiter:
    """A token bucket per (transport, sender); the least recently seen keys are dropped."""

    def __init__(
        self, default: tuple[int, float], per_transport: dict[str, tuple[int, float]], max_keys: int
    ) -> None:
        self.default = default
        self.per_transport = per_transport
        self.max_keys = max_keys
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def allow(self, transport: str, sender: str, now: float | None = None) -> bool:
        count, period = self.per_transport.get(transport, self.default)
        now = time.monotonic() if now is None else now
        key = (transport, sender)
        tokens, last = self._buckets.pop(key, (float(count), now))
        tokens = min(float(count), tokens + (now - last) * count / period)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)


class _Bounded:
    """An LRU set: remembers the last `limit` keys."""

    def __init__(self, limit: int) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def add(self, key: str) -> bool:
        """True if the key is new."""
        new = key not in self._keys
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._limit:
            self._keys.popitem(last=False)
        return new


@dataclass(kw_only=True)
class Router:
    agent: Agent
    store: Store
    transports: dict[str, Transport]
    policies: dict[str, ChatPolicy]
    rate_limiter: RateLimiter
    denied_reply: str = ""
    max_concurrent_turns: int = 64
    session_cache: int = 256
    """Sessions kept in memory between turns (least recently used dropped first)..."""
    session_cache_messages: int = 20_000
    """...and the messages they may hold in all; a dropped session is reloaded from disk."""
    metrics: Metrics = field(default_factory=Metrics)
    approvals: ChatApprovals | None = None
    """Where `yes ID` / `no ID` answers go (ask-mode approval in chat), if anywhere."""
    new_session_id: Callable[[], str] = field(default=lambda: secrets.token_hex(6))

    def __post_init__(self) -> None:
        self.state = DaemonState(self.store)
        self._limiter = anyio.CapacityLimiter(self.max_concurrent_turns)
        self._queues: dict[str, deque[tuple[Inbound, bool]]] = {}
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._strangers = _Bounded(10_000)
        self._denied = _Bounded(10_000)
        self._wake: dict[str, anyio.Event] = {}
        self._tg: TaskGroup | None = None
        self._closing = False
        self._idle = anyio.Event()
        self._idle.set()
        self._delivered = anyio.Event()

    # -- intake ---------------------------------------------------------------------------

    async def submit(self, inbound: Inbound) -> None:
        """Take an inbound message; returns once it is persisted (or deliberately dropped)."""
        if self._closing:
            raise ShuttingDown()
        self.metrics.inbound.labels(inbound.transport).inc()
        policy = self.policies.get(inbound.transport, ChatPolicy())
        if await self._approval_answer(inbound, policy):
            return
        if inbound.is_group and policy.require_mention and not inbound.mentioned:
            log.debug("router.ignored_group", transport=inbound.transport, chat=inbound.chat_id)
            return
        if not await self._admitted(inbound, policy):
            if await self.state.accept(inbound, ignored=True):
                await self._stranger(inbound, policy)
            return
        if not self.rate_limiter.allow(inbound.transport, inbound.sender_id):
            if await self.state.accept(inbound, ignored=True):
                log.info(
                    "router.rate_limited", transport=inbound.transport, sender=inbound.sender_id
                )
                if self.denied_reply and self._denied.add(
                    f"{inbound.session_key}:{int(time.time() // 60)}"
                ):
                    await self._reply(inbound, self.denied_reply, finish=False)
            return
        if not await self.state.accept(inbound):
            log.info("router.duplicate", transport=inbound.transport, message=inbound.message_id)
            return
        self._dispatch(inbound, replay=False)

    async def _approval_answer(self, inbound: Inbound, policy: ChatPolicy) -> bool:
        """An owner's `yes ID` / `no ID` settles a waiting tool call and goes no further (in
        groups too, mention or not). From a stranger it is an ordinary, ignored message."""
        approvals = self.approvals
        if approvals is None or not approvals.is_answer(inbound.text):
            return False
        who = f"{inbound.transport}:{inbound.sender_id}"
        if who not in approvals.owners and not await self._admitted(inbound, policy):
            return False
        if await self.state.accept(inbound, ignored=True):  # a redelivery answers nothing
            await self._reply(inbound, approvals.answer(inbound), finish=False)
        return True

    async def _admitted(self, inbound: Inbound, policy: ChatPolicy) -> bool:
        if policy.policy == "open" or inbound.sender_id in policy.allowlist:
            return True
        return await self.state.is_allowed(inbound.transport, inbound.sender_id)

    async def _stranger(self, inbound: Inbound, policy: ChatPolicy) -> None:
        if policy.policy == "pairing":
            code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
            given = await self.state.pairing_code(
                inbound.transport, inbound.sender_id, inbound.chat_id, code, PAIRING_TTL
            )
            if given is None:
                log.warning("router.pairing_full", transport=inbound.transport)
                return
            await self._reply(
                inbound,
                f"I don't know you yet. Ask my owner to run: rousseau pair approve {given}\n"
                "(the code is valid for one hour)",
                finish=False,
            )
            log.info("router.pairing_code", transport=inbound.transport, sender=inbound.sender_id)
            return
        if self._strangers.add(f"{inbound.transport}:{inbound.sender_id}"):
            log.warning(
                "router.ignored_sender",
                transport=inbound.transport,
                sender=inbound.sender_id,
                hint=f"to admit them, add {inbound.sender_id!r} to {inbound.transport}.allowlist"
                f" or set {inbound.transport}.policy: pairing",
            )

    # -- sessions and turns ---------------------------------------------------------------

    def _dispatch(self, inbound: Inbound, *, replay: bool) -> None:
        assert self._tg is not None, "the router is not running"
        key = inbound.session_key
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            self._idle = anyio.Event()
            self._tg.start_soon(self._worker, key, queue)
        queue.append((inbound, replay))
        self.metrics.queue_depth.set(sum(len(q) for q in self._queues.values()))

    async def _worker(self, key: str, queue: deque[tuple[Inbound, bool]]) -> None:
        try:
            while queue:
                inbound, replay = queue.popleft()
                async with self._limiter:
                    await self._process(inbound, replay)
        finally:
            del self._queues[key]
            if not self._queues:
                self._idle.set()

    async def _process(self, inbound: Inbound, replay: bool) -> None:
        with structlog.contextvars.bound_contextvars(
            transport=inbound.transport, chat=inbound.chat_id, message=inbound.message_id
        ):
            command = (
                inbound.text.strip().split(maxsplit=1)[0].lower() if inbound.text.strip() else ""
            )
            if command in ("/new", "/reset"):
                await self._new_session(inbound)
                await self._reply(inbound, "Started a new conversation.")
                return
            if command == "/help":
                await self._reply(inbound, HELP)
                return
            session = await self._session(inbound)
            current_inbound.set(inbound)  # this task's context: tools see which chat asked
            with structlog.contextvars.bound_contextvars(session=session.id):
                if not (replay and await self.state.was_appended(inbound)):
                    await self.agent.append(session, Message.user(_user_text(inbound)))
                    await self.state.mark_appended(inbound)
                started = time.monotonic()
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._typing, inbound)
                        try:
                            response = await self.agent.turn(session)
                        finally:
                            tg.cancel_scope.cancel()
                    text = response.message.text.strip()
                    self.metrics.tokens(response.usage)
                except Exception:
                    log.exception("router.turn_failed")
                    self.metrics.errors.labels(inbound.transport).inc()
                    text = FAILED_REPLY
                self.metrics.turn_seconds.observe(time.monotonic() - started)
                if not text:
                    log.info("router.empty_reply")
                await self._reply(inbound, text)

    async def _session(self, inbound: Inbound) -> Session:
        key = inbound.session_key
        cached = self._sessions.get(key)
        if cached is not None:
            self._sessions.move_to_end(key)
            self._trim_sessions()
            return cached
        session_id = await self.state.session_for(key)
        session = await self.store.load(session_id) if session_id else None
        if session is None:
            session = await self.store.create_session(session_id or self.new_session_id())
            await self._bind(inbound, session.id)
        self._sessions[key] = session
        self._trim_sessions()
        return session

    async def _bind(self, inbound: Inbound, session_id: str) -> None:
        # Recall in a private chat may search its person's other private chats; a group's
        # session belongs to the group, so nobody's private memory surfaces there.
        chat = f"{inbound.transport}:{inbound.chat_id}"
        owner = chat if inbound.is_group else f"{inbound.transport}:{inbound.sender_id}"
        await self.state.bind_session(inbound.session_key, session_id, owner=owner, chat=chat)

    def _trim_sessions(self) -> None:
        held = sum(len(s.messages) for s in self._sessions.values())
        while len(self._sessions) > 1 and (
            len(self._sessions) > self.session_cache or held > self.session_cache_messages
        ):
            _, dropped = self._sessions.popitem(last=False)
            held -= len(dropped.messages)

    async def _new_session(self, inbound: Inbound) -> None:
        session = await self.store.create_session(self.new_session_id())
        await self._bind(inbound, session.id)
        self._sessions[inbound.session_key] = session
        log.info("router.new_session", session=session.id)

    async def _typing(self, inbound: Inbound) -> None:
        transport = self.transports.get(inbound.transport)
        if transport is None:
            return
        await anyio.sleep(TYPING_AFTER)
        while True:
            try:
                await transport.typing(inbound.chat_id, inbound.thread_id)
            except Exception as exc:
                log.debug("router.typing_failed", error=str(exc))
            await anyio.sleep(TYPING_EVERY)

    async def _reply(self, inbound: Inbound, text: str, *, finish: bool = True) -> None:
        """Queue the reply, split for the platform, marking the inbound done in one step."""
        parts = self._parts(
            inbound.transport,
            inbound.chat_id,
            text,
            thread_id=inbound.thread_id,
            reply_to=inbound.message_id,
        )
        await self._queue(inbound.transport, parts, done=inbound if finish else None)

    async def notify(
        self, transport: str, chat_id: str, text: str, buttons: tuple[str, ...] = ()
    ) -> int:
        """Queue a message that answers nobody (a cron reply, a notice, a question with
        answer `buttons`) for delivery through the outbox, split for the platform; returns
        how many parts."""
        parts = self._parts(transport, chat_id, text)
        if parts and buttons:  # on the last part, under the whole text
            parts[-1] = dataclasses.replace(parts[-1], buttons=buttons)
        await self._queue(transport, parts)
        return len(parts)

    async def _queue(
        self, transport: str, parts: list[Outbound], done: Inbound | None = None
    ) -> None:
        """Into the outbox (with `done` marked answered in the same step); wake its sender."""
        await self.state.finish(done, parts)
        if parts:
            self.wake(transport)

    def _parts(
        self,
        name: str,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> list[Outbound]:
        if not text:
            return []
        transport = self.transports.get(name)
        policy = self.policies.get(name, ChatPolicy())
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

    # -- delivery -------------------------------------------------------------------------

    def wake(self, transport: str) -> None:
        event = self._wake.get(transport)
        if event is not None:
            event.set()

    async def deliver(self, name: str) -> None:
        """Send the outbox of one transport: chats in parallel, each chat's parts in order,
        failures retried with backoff."""
        transport = self.transports[name]
        limiter = anyio.CapacityLimiter(DELIVERY_CHATS)
        while True:
            self._wake[name] = wake = anyio.Event()
            rows = await self.state.due(name, DELIVERY_BATCH)
            chats: dict[tuple[str, str | None], list[OutboxRow]] = {}
            for row in rows:
                chats.setdefault((row.message.chat_id, row.message.thread_id), []).append(row)
            async with anyio.create_task_group() as tg:
                for chat_rows in chats.values():
                    tg.start_soon(self._deliver_chat, transport, chat_rows, limiter)
            self.metrics.outbox_pending.set(await self.state.outbox_pending())
            self._delivered.set()
            if len(rows) == DELIVERY_BATCH:
                continue
            next_at = await self.state.next_due_at(name)
            wait = 5.0 if next_at is None else max(0.0, min(5.0, next_at - time.time()))
            with anyio.move_on_after(wait):
                await wake.wait()

    async def _deliver_chat(
        self, transport: Transport, rows: list[OutboxRow], limiter: anyio.CapacityLimiter
    ) -> None:
        async with limiter:
            for row in rows:
                try:
                    await transport.send(row.message)
                except Exception as exc:
                    attempts = row.attempts + 1
                    delay = min(300.0, 2.0**attempts) * (0.5 + secrets.randbelow(1000) / 1000)
                    give_up = attempts >= 12
                    log.warning(
                        "router.send_failed",
                        transport=transport.name,
                        attempt=attempts,
                        retry_in=round(delay, 1),
                        error=str(exc),
                        gave_up=give_up,
                    )
                    await self.state.retry_later(row.id, delay, str(exc), give_up=give_up)
                    return  # keep the order: this chat's later parts wait for this one
                await self.state.sent(row.id)
                self.metrics.replies.labels(transport.name).inc()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the session workers; replay what a crash left pending; run until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for inbound in await self.state.pending():
                log.info("router.replay", transport=inbound.transport, message=inbound.message_id)
                self._dispatch(inbound, replay=True)
            task_status.started()
            await anyio.sleep_forever()

    async def drain(self, grace: float) -> bool:
        """Stop intake; give in-flight turns and their replies `grace` seconds to finish.

        True if everything finished and was delivered; what was not stays pending on disk
        and is picked up at the next start.
        """
        self._closing = True
        with anyio.move_on_after(grace):
            await self._idle.wait()
            for name in self.transports:
                self.wake(name)
            while await self.state.outbox_pending():
                self._delivered = anyio.Event()
                with anyio.move_on_after(0.5):  # a send that fails waits for its retry time
                    await self._delivered.wait()
            return True
        log.warning("router.drain_timeout", unfinished=len(self._queues))
        return False


def _user_text(inbound: Inbound) -> str:
    if inbound.is_group and inbound.sender_name:
        return f"{inbound.sender_name}: {inbound.text}"
    return inbound.text
