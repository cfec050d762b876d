"""The Router: inbound -> dedupe -> policy -> session -> agent -> outbox (DESIGN.md section 1).

Turns of one session run one at a time in arrival order; turns of different sessions run
concurrently up to `max_concurrent_turns`. Every inbound is persisted before the platform is
acknowledged, and its reply is queued in the same transaction that marks it done.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import secrets
import time
import traceback
import zlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from rousseau.agent import (
    Agent,
    Attachment,
    Content,
    Message,
    Response,
    Role,
    Session,
    StoreError,
    StreamEvent,
    StreamEventKind,
)
from rousseau.agents import Routes
from rousseau.approvals import ChatApprovals
from rousseau.backoff import backoff
from rousseau.delivery import Courier
from rousseau.messages import (
    Inbound,
    KeyValue,
    Outbound,
    OutgoingFiles,
    current_inbound,
    outgoing_files,
)
from rousseau.metrics import Metrics
from rousseau.policy import Admission, ChatPolicy, RateLimiter, Verdict
from rousseau.state import SessionStore, Store
from rousseau.state.daemon_state import DaemonState, Progress, TransportState
from rousseau.state.protocol import DaemonStore, SharedState
from rousseau.state.store import StoreFullError
from rousseau.streaming import (
    LEFTOVER,
    Preview,
    StreamSettings,
    status_line,
)
from rousseau.transports.abilities import Abilities
from rousseau.transports.base import Transport
from rousseau.transports.split import split_message

__all__ = ["FAILED_REPLY", "ChatPolicy", "RateLimiter", "Router", "ShuttingDown"]

log = structlog.get_logger("rousseau.router")

HELP = (
    "I'm an assistant. Just write to me.\n"
    "/new or /reset: start a fresh conversation\n"
    "/stop: stop the answer being written\n"
    "/help: this message"
)
FAILED_REPLY = (
    "Sorry, I couldn't answer that just now (the model did not respond). "
    "Your message is kept; please try again in a moment."
)
TIMEOUT_REPLY = (
    "Sorry, that took too long, so I stopped working on it. "
    "Your message is kept; please try again, perhaps with a smaller request."
)
_HINTED = "rousseau.voice_hint:"
"""A chat's key, among its transport's state, once it was given the voice hint."""
BROKEN_REPLY = (
    "Sorry, something went wrong on my side while handling that message, "
    "and trying again did not help. My owner can find it in the logs."
)
STOPPED = "Stopped."
NOTHING_TO_STOP = "Nothing is running."
WAITING = "⏳ waiting for an owner to approve a tool call…"
STOPPED_MARK = "(stopped)"
"""What a stopped turn's preview is left showing."""
TYPING_EVERY = 4.0
TYPING_AFTER = 0.5  # a reply faster than this needs no typing indicator
MAX_ATTEMPTS = 3
"""Tries of one message that keeps failing (not for want of disk) before it is given up."""
RETRY_CAP = 30.0

_in_slot: ContextVar[tuple[anyio.CapacityLimiter, ...]] = ContextVar("in_turn_slot", default=())
"""The turn slots this task holds: its agent's (if it has a limit), then the daemon's."""
_previewing: ContextVar[Preview | None] = ContextVar("previewing", default=None)


class ShuttingDown(Exception):
    """The daemon is stopping; the adapter must not acknowledge this message."""


@dataclass(slots=True)
class _Item:
    inbound: Inbound
    replay: bool
    attempts: int = 0
    """Failed tries that count towards giving up."""
    waits: int = 0
    """Tries that failed for want of disk space (never given up on)."""


class _Later:
    """Tasks started in a task group after a delay, by the event loop's timers: a turn that
    ends first starts none of them (a task started and cancelled at each turn, for typing and
    again for the preview, cost 2-3% of a message's CPU). The daemon runs on asyncio."""

    def __init__(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._loop = asyncio.get_running_loop()
        self._timers: list[asyncio.TimerHandle] = []

    def start(self, delay: float, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        self._timers.append(self._loop.call_later(delay, self._spawn, fn, args))

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]) -> None:
        self._tg.start_soon(fn, *args)

    def cancel(self) -> None:
        """Start nothing more (before the task group ends: a later start would fail)."""
        for timer in self._timers:
            timer.cancel()
        # A cancelled timer keeps the context it was made in, which may hold what holds this:
        # let go of it, so that what the turn made is freed when it ends, not by the GC.
        self._timers.clear()


class _SessionCache:
    """Sessions kept in memory between turns, least recently used first, and the messages
    they hold. A session grows only in its own turn, so its messages are counted as it is
    taken for the next one: keeping the bound never walks every session (that walk, at each
    message, cost 2% of its CPU with 160 chats). The count lags by each session's last turn."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._counted: dict[str, int] = {}
        self.held = 0
        """The messages counted in all."""

    def __len__(self) -> int:
        return len(self._sessions)

    def take(self, key: str) -> Session | None:
        """The session of `key`, now the most recently used, or None."""
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            self._count(key, session)
        return session

    def put(self, key: str, session: Session) -> None:
        self.pop(key)
        self._sessions[key] = session
        self._count(key, session)

    def pop(self, key: str) -> None:
        if self._sessions.pop(key, None) is not None:
            self.held -= self._counted.pop(key)

    def trim(self, sessions: int, messages: int) -> None:
        """Drop the least recently used until at most `sessions` hold at most `messages`
        (the newest is always kept)."""
        while len(self._sessions) > 1 and (len(self._sessions) > sessions or self.held > messages):
            key, _ = self._sessions.popitem(last=False)
            self.held -= self._counted.pop(key)

    def _count(self, key: str, session: Session) -> None:
        count = len(session.messages)
        self.held += count - self._counted.get(key, 0)
        self._counted[key] = count


@dataclass(kw_only=True)
class Router:
    agent: Agent
    """The default agent (the only one unless `agents:` is configured)."""
    store: SessionStore
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
    turn_timeout: float = 600.0
    """A turn still running after this is cancelled and the user told."""
    send_timeout: float = 60.0
    """One send to a platform at most; then it is abandoned and retried later."""
    new_session_id: Callable[[], str] = field(default=lambda: secrets.token_hex(6))
    streaming: dict[str, StreamSettings] = field(default_factory=dict)
    """Per transport: whether replies stream into the chat, and with what progress."""
    agents: dict[str, Agent] = field(default_factory=dict)
    """The other named agents, which `routes` may choose."""
    routes: Routes = field(default_factory=Routes)
    """Which agent answers each message (the default agent when none is named)."""
    file_moves: dict[str, Callable[[Attachment], Awaitable[Attachment]]] = field(
        default_factory=dict
    )
    """Per agent whose workspace is not the one files arrive in: how a file is moved into
    its own (see media.move_to_workspace)."""
    agent_turns: dict[str, int] = field(default_factory=dict)
    """Agents whose turns running at once have a limit of their own (within
    max_concurrent_turns), so a busy group cannot take every slot from a private chat."""
    acks: dict[str, str] = field(default_factory=dict)
    """Per transport: the reaction put on each message taken in for a turn (a receipt)."""
    voice_hint: str = ""
    """Said once in each chat that sends audio nobody transcribes (no speech-to-text is set
    up), after the answer; empty where voice notes are transcribed."""

    daemon_state: DaemonStore | None = None
    """The inbox, outbox and chat map; None: DaemonState beside a SQLite `store`."""
    transport_state: Callable[[str], KeyValue] | None = None
    """A transport's own durable state; None: TransportState beside a SQLite `store`."""
    shared: SharedState | None = None
    """Where several daemons share the store: each turn holds its session, so one
    session's turns never run on two daemons at once (and the session is read afresh, since
    another daemon may have added to it), after answering its chat's earlier messages that
    a dead daemon left."""

    def __post_init__(self) -> None:
        self.state: DaemonStore = self.daemon_state or DaemonState(_sqlite(self.store))
        self._kv: Callable[[str], KeyValue] = self.transport_state or functools.partial(
            TransportState, _sqlite(self.store)
        )
        self.admission = Admission(
            state=self.state,
            policies=self.policies,
            rate_limiter=self.rate_limiter,
            approvals=self.approvals,
            denied_reply=self.denied_reply,
        )
        if self.approvals is not None:
            self.approvals.waiting = self.slot_released
        self._limiter = anyio.CapacityLimiter(self.max_concurrent_turns)
        self._agent_limiters = {
            name: anyio.CapacityLimiter(turns) for name, turns in self.agent_turns.items()
        }
        self._queues: dict[str, deque[_Item]] = {}
        self._sessions = _SessionCache()
        self._couriers: dict[str, Courier] = {}
        self._intake_failures: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._can = {name: Abilities.of(t) for name, t in self.transports.items()}
        self._running: dict[str, tuple[Inbound, anyio.CancelScope]] = {}
        """The turn running in each session, and the message it answers (what /stop
        cancels)."""
        self._tg: TaskGroup | None = None
        self._closing = False
        self._idle = anyio.Event()
        self._idle.set()

    # -- intake ---------------------------------------------------------------------------

    async def submit(self, inbound: Inbound) -> None:
        """Take an inbound message; returns once it is persisted (or deliberately dropped).

        Raises (so the adapter does not acknowledge it, and the platform redelivers) when it
        could not be persisted; a message that keeps making intake fail for another reason
        is recorded as failed and skipped, so it cannot block the ones behind it.
        """
        if self._closing:
            raise ShuttingDown()
        self.metrics.inbound.labels(inbound.transport).inc()
        try:
            admitted = await self.admission.decide(inbound)
            if admitted.verdict is Verdict.ANSWER:
                await self._reply(inbound, admitted.reply, finish=False)
        except StoreFullError:
            raise  # not this message's fault: it waits, unacknowledged, for space
        except Exception as exc:
            if not self._poison(inbound, exc):
                raise
            return
        if admitted.verdict is Verdict.TURN:
            self._dispatch(_Item(inbound, replay=False))
            if inbound.transport in self.acks and self._tg is not None:
                self._tg.start_soon(self._ack, inbound)

    async def _ack(self, inbound: Inbound) -> None:
        """The receipt reaction, where the transport has reactions (best effort: a failure
        costs only the receipt)."""
        reacts = self._abilities(inbound.transport).reacts
        if reacts is None:
            return
        try:
            with anyio.fail_after(self.send_timeout):
                await reacts.react(inbound, self.acks[inbound.transport])
        except Exception as exc:
            log.info("router.ack_failed", transport=inbound.transport, error=str(exc))

    def _poison(self, inbound: Inbound, exc: Exception) -> bool:
        """Count a failed intake; True once this message has failed too often to retry."""
        key = (inbound.transport, inbound.message_id)
        failures = self._intake_failures.pop(key, 0) + 1
        self._intake_failures[key] = failures
        while len(self._intake_failures) > 1000:
            self._intake_failures.popitem(last=False)
        self.metrics.retries.labels("intake").inc()
        if failures < MAX_ATTEMPTS:
            log.warning("router.intake_failed", attempt=failures, exc_info=exc)
            return False
        log.error(
            "router.intake_gave_up",
            transport=inbound.transport,
            message=inbound.message_id,
            exc_info=exc,
        )
        self.metrics.failed_inbound.labels(inbound.transport).inc()
        return True

    # -- sessions and turns ---------------------------------------------------------------

    def _dispatch(self, item: _Item) -> None:
        assert self._tg is not None, "the router is not running"
        agent = self.routes.agent_of(item.inbound)
        if agent != item.inbound.agent:
            item = replace(item, inbound=replace(item.inbound, agent=agent))
        key = item.inbound.session_key
        if _command(item.inbound) == "/stop":  # not behind the turn it stops
            self._tg.start_soon(self._stop_turn, item)
            return
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            if self._idle.is_set():  # the first queue: busy from now on
                self._idle = anyio.Event()
            self._tg.start_soon(self._worker, key, queue)
        queue.append(item)
        self.metrics.queue_depth.set(sum(len(q) for q in self._queues.values()))

    async def _worker(self, key: str, queue: deque[_Item]) -> None:
        """Answer one session's messages in order; a failure fails (and retries) one message,
        never the router."""
        try:
            while queue:
                item = queue[0]
                try:
                    async with self._turn_slot(item.inbound.agent):
                        await self._process(item)
                except Exception as exc:
                    if await self._failed(key, item, exc):
                        continue  # try the same message again, still first in line
                queue.popleft()
        finally:
            del self._queues[key]
            if not self._queues:
                self._idle.set()

    async def _failed(self, key: str, item: _Item, exc: Exception) -> bool:
        """After a message's processing failed: wait and return True to retry it, or record
        it as failed (with the traceback, and the user told once) and return False."""
        self._sessions.pop(key)  # what is in memory may not be on disk: reload it
        self.metrics.retries.labels("turn").inc()
        full = isinstance(exc, StoreFullError)
        if full:
            item.waits += 1
        else:
            item.attempts += 1
        if full or item.attempts < MAX_ATTEMPTS:
            tries = item.attempts + item.waits
            delay = backoff(tries, base=0.25, cap=RETRY_CAP)
            log.warning(
                "router.turn_retry",
                message=item.inbound.message_id,
                attempt=item.attempts,
                retry_in=round(delay, 2),
                exc_info=not full,
                error=str(exc),
            )
            await anyio.sleep(delay)
            return True
        trace = "".join(traceback.format_exception(exc))
        log.error("router.message_failed", message=item.inbound.message_id, exc_info=exc)
        self.metrics.failed_inbound.labels(item.inbound.transport).inc()
        try:
            await self._reply(item.inbound, BROKEN_REPLY, error=trace[-4000:])
        except Exception:  # still pending on disk: the next start replays it
            log.exception("router.record_failed", message=item.inbound.message_id)
        return False

    async def _stop_turn(self, item: _Item) -> None:
        """`/stop`: cancel the session's running turn (the agent closes what it cut short,
        a running command is killed), and say so."""
        inbound = item.inbound
        running = self._running.get(inbound.session_key)
        # Else the sender's own turns in other threads of the chat: a new mail, or a new
        # thread, is where /stop may come from when the turn runs in another.
        scopes = (
            [running[1]]
            if running is not None
            else [
                scope
                for asked, scope in self._running.values()
                if (asked.transport, asked.chat_id, asked.sender_id)
                == (inbound.transport, inbound.chat_id, inbound.sender_id)
            ]
        )
        for scope in scopes:
            scope.cancel()
            log.info("router.turn_stopped", transport=inbound.transport, chat=inbound.chat_id)
        try:
            await self._reply(inbound, STOPPED if scopes else NOTHING_TO_STOP)
        except Exception:  # still pending on disk: the next start answers it
            log.exception("router.record_failed", message=inbound.message_id)

    async def _process(self, item: _Item) -> None:
        inbound = item.inbound
        with structlog.contextvars.bound_contextvars(
            transport=inbound.transport,
            chat=inbound.chat_id,
            message=inbound.message_id,
            agent=inbound.agent,
        ):
            command = _command(inbound)
            if command in ("/new", "/reset"):
                await self._new_session(inbound)
                await self._reply(inbound, "Started a new conversation.")
                return
            if command == "/help":
                await self._reply(inbound, HELP)
                return
            if inbound.refusal:  # its files were refused: say so, and spend no model call
                await self._reply(inbound, inbound.refusal)
                return
            if self.shared is None:
                await self._answer(item)
                return
            async with self.shared.session_claimed(inbound.session_key):
                self._sessions.pop(inbound.session_key)  # another daemon may have added
                for left in await self.shared.earlier(inbound):  # the chat's order first
                    log.info("router.replay", transport=left.transport, message=left.message_id)
                    agent = self.routes.agent_of(left)
                    await self._answer(_Item(replace(left, agent=agent), replay=True))
                if await self.shared.unanswered(inbound):
                    await self._answer(item)

    async def _answer(self, item: _Item) -> None:
        """A turn for the inbound, its reply queued (or what an earlier try left, replied)."""
        inbound = item.inbound
        session = await self._session(inbound)
        current_inbound.set(inbound)  # this task's context: tools see which chat asked
        with structlog.contextvars.bound_contextvars(session=session.id):
            progress = Progress()
            if item.replay or item.attempts or item.waits:
                progress = await self.state.progress(inbound, session.id)
                if progress.done is not None:  # answered before a stop, never queued
                    log.info("router.turn_already_finished")
                    await self._reply(
                        inbound,
                        progress.done.strip(),
                        files=progress.files,
                        replaces=progress.preview,
                    )
                    return
                if progress.files:
                    await self.state.forget_sent_files(inbound)
            if not progress.appended:
                await self._append_user(session, inbound)
            outgoing = OutgoingFiles(
                transport=inbound.transport,
                keep=functools.partial(self.state.sent_file, inbound),
            )
            outgoing_files.set(outgoing)  # what send_file adds goes out with the answer
            preview = self._preview(inbound, progress.preview)
            try:
                answer = await self._turn(session, inbound, preview)
            except StoreError:
                await self._settle_history(inbound, session.id)
                raise
            hint = await self._voice_hint(inbound)
            # Written after the turn's queued history (and failing if that was lost).
            await self._reply(
                inbound,
                answer,
                files=outgoing.files,
                notice=hint,
                replaces=preview.ids if preview is not None else progress.preview,
                history=session.id,
            )
            if hint:
                await self._kv(inbound.transport).set(_HINTED + inbound.chat_id, "1")

    async def _settle_history(self, inbound: Inbound, session_id: str) -> None:
        """A turn failed on the store before its finish: its queued history writes are
        waited for, a lost one reported now with that failure (the retry's finish would
        otherwise fail on it again)."""
        history = self._agent(inbound).options.history
        if history is not None:
            with contextlib.suppress(Exception):
                await history.flush(session_id)

    async def _voice_hint(self, inbound: Inbound) -> str:
        """The voice hint, if this message carried audio and its chat was never told."""
        if not self.voice_hint or not any(
            a.media_type.startswith("audio/") for a in inbound.attachments
        ):
            return ""
        told = await self._kv(inbound.transport).get(_HINTED + inbound.chat_id)
        return "" if told else self.voice_hint

    def _abilities(self, transport: str) -> Abilities:
        return self._can.get(transport) or Abilities()

    def _agent(self, inbound: Inbound) -> Agent:
        return self.agents.get(inbound.agent, self.agent)

    async def _append_user(self, session: Session, inbound: Inbound) -> None:
        text = _user_text(inbound)
        content = [Content.of_text(text)] if text or not inbound.attachments else []
        move = self.file_moves.get(inbound.agent)
        for attachment in inbound.attachments:
            content.append(Content.of_attachment(await move(attachment) if move else attachment))
        await self._agent(inbound).append(session, Message(role=Role.USER, content=content))
        await self.state.mark_appended(inbound, session.id)

    def _preview(self, inbound: Inbound, shown: list[str]) -> Preview | None:
        """A preview for this turn's reply, where its transport streams (continuing the
        messages an earlier try of the turn was shown in)."""
        settings = self.streaming.get(inbound.transport)
        can = self._abilities(inbound.transport)
        edits = can.edits
        if settings is None or settings.streaming == "off" or edits is None:
            return None
        drafts = can.drafts if settings.streaming == "native" else None
        return Preview(
            transport=edits,
            chat_id=inbound.chat_id,
            thread_id=inbound.thread_id,
            ids=list(shown),
            keep=functools.partial(self.state.shown_preview, inbound),
            drafts=drafts if drafts is not None and not inbound.is_group else None,
            draft_id=zlib.crc32(inbound.message_id.encode()) or 1,
            interval=settings.interval,
            raw=can.raw_previews,
        )

    async def _turn(self, session: Session, inbound: Inbound, preview: Preview | None) -> str:
        """The turn's answer, or an honest apology if the model failed or took too long.
        A store failure propagates: the message is then retried, not answered."""
        started = time.monotonic()
        failure: Exception | None = None
        stopped = False
        async with anyio.create_task_group() as tg:
            # Typing and the preview start when due: most turns end before either is.
            later = _Later(tg)
            later.start(TYPING_AFTER, self._typing, inbound)
            if preview is not None:
                preview.due = functools.partial(later.start, fn=preview.run)
            try:
                with anyio.fail_after(self.turn_timeout):
                    with anyio.CancelScope() as scope:
                        self._running[inbound.session_key] = (inbound, scope)
                        response = await self._stream(session, inbound, preview)
                    stopped = scope.cancelled_caught
            except Exception as exc:  # caught here, not wrapped in the task group's group
                failure = exc
            finally:
                self._running.pop(inbound.session_key, None)
                later.cancel()
                tg.cancel_scope.cancel()
                if preview is not None:
                    preview.due = None  # it holds `later`, which may hold the preview
        if preview is not None:  # the final edit, too, keeps to one update a second
            await preview.settle()
        if stopped:  # /stop: the session keeps what was complete; nothing more is said
            self.metrics.turn_seconds.observe(time.monotonic() - started)
            return STOPPED_MARK if preview is not None and preview.ids else ""
        if isinstance(failure, StoreError):
            raise failure
        if isinstance(failure, TimeoutError):
            log.warning("router.turn_timeout", timeout=self.turn_timeout)
            self.metrics.errors.labels(inbound.transport).inc()
            text = TIMEOUT_REPLY
        elif failure is not None:
            log.error("router.turn_failed", exc_info=failure)
            self.metrics.errors.labels(inbound.transport).inc()
            text = FAILED_REPLY
        else:
            text = response.message.text.strip()
            self.metrics.tokens(response.usage)
        self.metrics.turn_seconds.observe(time.monotonic() - started)
        if not text:
            log.info("router.empty_reply")
        return text

    async def _stream(
        self, session: Session, inbound: Inbound, preview: Preview | None
    ) -> Response:
        """Run the turn; with a preview, show the answer (or what a tool does) as it comes."""
        agent = self._agent(inbound)
        if preview is None:
            return await agent.turn(session, flush=False)  # _answer's finish flushes
        settings = self.streaming.get(inbound.transport) or StreamSettings()
        progress = settings.shows_progress(inbound.is_group)

        def show(event: StreamEvent) -> None:
            if event.kind is StreamEventKind.TEXT:
                preview.write(event.text)
            elif event.kind is StreamEventKind.TOOL_CALL and event.tool_use is not None:
                if progress:
                    preview.status(status_line(event.tool_use))
            elif event.response is not None:
                preview.next_step()

        token = _previewing.set(preview)  # for this turn only: an approval wait shows in it
        try:
            return await agent.turn(session, on_event=show, flush=False)
        finally:
            _previewing.reset(token)

    @asynccontextmanager
    async def _turn_slot(self, agent: str) -> AsyncIterator[None]:
        """A turn's slot: its agent's own (where the agent has a limit), then the daemon's."""
        own = self._agent_limiters.get(agent)
        held = (self._limiter,) if own is None else (own, self._limiter)
        async with own or contextlib.nullcontext(), self._limiter:
            token = _in_slot.set(held)
            try:
                yield
            finally:
                _in_slot.reset(token)

    @asynccontextmanager
    async def slot_released(self) -> AsyncIterator[None]:
        """While a turn waits for a person (an approval), its turn slot serves others, and
        its preview (if its reply streams) says what it waits for."""
        preview = _previewing.get()
        if preview is not None:
            preview.status(WAITING)
        held = _in_slot.get()
        for limiter in reversed(held):
            limiter.release()
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                for limiter in held:
                    await limiter.acquire()

    async def _session(self, inbound: Inbound) -> Session:
        key = inbound.session_key
        cached = self._sessions.take(key)
        if cached is not None:
            self._sessions.trim(self.session_cache, self.session_cache_messages)
            return cached
        session_id = await self.state.session_for(key)
        session = await self.store.load(session_id) if session_id else None
        if session is None:
            session = await self.store.create_session(session_id or self.new_session_id())
            await self._bind(inbound, session.id)
        self._sessions.put(key, session)
        self._sessions.trim(self.session_cache, self.session_cache_messages)
        return session

    async def _bind(self, inbound: Inbound, session_id: str) -> None:
        # Recall in a private chat may search its person's other private chats; a group's
        # session belongs to the group, so nobody's private memory surfaces there.
        chat = f"{inbound.transport}:{inbound.chat_id}"
        owner = chat if inbound.is_group else f"{inbound.transport}:{inbound.sender_id}"
        await self.state.bind_session(
            inbound.session_key, session_id, owner=owner, chat=chat, agent=inbound.agent
        )

    async def _new_session(self, inbound: Inbound) -> None:
        session = await self.store.create_session(self.new_session_id())
        await self._bind(inbound, session.id)
        self._sessions.put(inbound.session_key, session)
        log.info("router.new_session", session=session.id)

    async def _typing(self, inbound: Inbound) -> None:
        transport = self.transports.get(inbound.transport)
        if transport is None:
            return
        while True:
            try:
                with anyio.fail_after(self.send_timeout):
                    await transport.typing(inbound.chat_id, inbound.thread_id)
            except Exception as exc:
                log.debug("router.typing_failed", error=str(exc))
            await anyio.sleep(TYPING_EVERY)

    async def _reply(
        self,
        inbound: Inbound,
        text: str,
        *,
        finish: bool = True,
        error: str | None = None,
        files: Sequence[tuple[Attachment, str]] = (),
        notice: str = "",
        replaces: Sequence[str] = (),
        history: str | None = None,
    ) -> None:
        """Queue the reply, split for the platform, then any files the turn sent and a
        `notice` of its own, marking the inbound done (or failed, with `error`) in one step
        (with the queued writes of the `history` session, see DaemonState.finish).
        The first parts replace the messages in `replaces` (a streamed preview), one each;
        preview messages the reply does not need are edited to a mark."""
        parts = self._parts(
            inbound.transport,
            inbound.chat_id,
            text,
            thread_id=inbound.thread_id,
            reply_to=inbound.message_id,
        )
        for i, message_id in enumerate(replaces):
            if i < len(parts):
                parts[i] = dataclasses.replace(parts[i], replaces=message_id)
            else:
                parts.append(
                    Outbound(
                        transport=inbound.transport,
                        chat_id=inbound.chat_id,
                        thread_id=inbound.thread_id,
                        text=LEFTOVER,
                        replaces=message_id,
                    )
                )
        if notice:
            parts += self._parts(
                inbound.transport, inbound.chat_id, notice, thread_id=inbound.thread_id
            )
        parts += _file_parts(inbound.transport, inbound.chat_id, files, inbound.thread_id)
        await self.state.finish(inbound if finish else None, parts, error=error, history=history)
        if parts:
            self.wake(inbound.transport)

    async def notify(
        self,
        transport: str,
        chat_id: str,
        text: str,
        buttons: tuple[str, ...] = (),
        *,
        files: Sequence[tuple[Attachment, str]] = (),
    ) -> int:
        """Queue a message that answers nobody (a cron reply, a notice, a question with
        answer `buttons`) for delivery through the outbox, split for the platform, then any
        `files` (with their captions); returns how many parts."""
        parts = self._parts(transport, chat_id, text)
        if parts and buttons:  # on the last part, under the whole text
            parts[-1] = dataclasses.replace(parts[-1], buttons=buttons)
        parts += _file_parts(transport, chat_id, files)
        await self.state.finish(None, parts)
        if parts:
            self.wake(transport)
        return len(parts)

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
        courier = self._couriers.get(transport)
        if courier is not None:
            courier.wake()

    async def deliver(self, name: str) -> None:
        """Send the outbox of one transport until cancelled (see rousseau.delivery)."""
        courier = self._couriers[name] = Courier(
            self.transports[name], self.state, metrics=self.metrics, send_timeout=self.send_timeout
        )
        await courier.run()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the session workers; replay what a crash left pending; run until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self.adopt(await self.state.pending())
            task_status.started()
            await anyio.sleep_forever()

    def adopt(self, pending: list[Inbound]) -> None:
        """Answer messages accepted before but never answered: what a crash left here, or
        (where daemons share the store) what a dead daemon left."""
        for inbound in pending:
            log.info("router.replay", transport=inbound.transport, message=inbound.message_id)
            self._dispatch(_Item(inbound, replay=True))

    async def wait_idle(self) -> None:
        """Return once no session queue holds a message (at once if none does): every
        message taken in so far is answered, its reply queued (not necessarily sent)."""
        while self._queues:
            await self._idle.wait()

    async def drain(self, grace: float) -> bool:
        """Stop intake; give in-flight turns and their replies `grace` seconds to finish.

        True if everything finished and was delivered; what was not stays pending on disk
        and is picked up at the next start.
        """
        self._closing = True
        with anyio.move_on_after(grace):
            await self._idle.wait()
            names = list(self._couriers)
            while await self.state.outbox_pending(names):
                for name in names:
                    self.wake(name)
                await anyio.sleep(0.1)  # a send that fails waits for its retry time
            return True
        log.warning("router.drain_timeout", unfinished=len(self._queues))
        return False


def _sqlite(store: SessionStore) -> Store:
    if not isinstance(store, Store):
        raise TypeError("a store other than SQLite's needs its daemon_state and transport_state")
    return store


def _user_text(inbound: Inbound) -> str:
    if inbound.is_group and inbound.sender_name and (inbound.text or inbound.attachments):
        return f"{inbound.sender_name}: {inbound.text}".rstrip()
    return inbound.text


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


def _command(inbound: Inbound) -> str:
    """The message's first word, lowercased, if it is a command (`/stop`)."""
    text = inbound.text.strip()
    return text.split(maxsplit=1)[0].lower() if text.startswith("/") else ""
