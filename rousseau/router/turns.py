"""The turn runner: one message's turn, from its user message to its queued answer, with
what the chat sees meanwhile (typing, a streamed preview, an approval wait) and the honest
reply when the model fails or takes too long (DESIGN.md section 1, steps 6 and 7). The
slots that bound how many turns run at once are in slots.py."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from rousseau.agent import (
    Agent,
    Attachment,
    BudgetExceededError,
    Content,
    Message,
    Response,
    Role,
    Session,
    StoreError,
    StreamEvent,
    StreamEventKind,
)
from rousseau.costs import Payer, paying, refusal
from rousseau.messages import (
    Inbound,
    KeyValue,
    OutgoingFiles,
    current_inbound,
    outgoing_files,
    turn_status,
)
from rousseau.metrics import Metrics
from rousseau.router.replies import Replies
from rousseau.router.sessions import Sessions
from rousseau.router.settings import RouterSettings
from rousseau.router.slots import previewing
from rousseau.router.voice import Speech, Voices
from rousseau.state.protocol import DaemonStore
from rousseau.state.records import Progress
from rousseau.streaming import Preview, StreamSettings, status_line
from rousseau.transports.abilities import Abilities
from rousseau.transports.base import Transport

log = structlog.get_logger("rousseau.router")

FAILED_REPLY = (
    "Sorry, I couldn't answer that just now (the model did not respond). "
    "Your message is kept; please try again in a moment."
)
TIMEOUT_REPLY = (
    "Sorry, that took too long, so I stopped working on it. "
    "Your message is kept; please try again, perhaps with a smaller request."
)
STOPPED_MARK = "(stopped)"
"""What a stopped turn's preview is left showing."""
TYPING_EVERY = 4.0
TYPING_AFTER = 0.5  # a reply faster than this needs no typing indicator


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


class Turns:
    """Runs the turns the Router's workers hand it, one message each."""

    def __init__(
        self,
        *,
        agent: Agent,
        agents: Mapping[str, Agent],
        settings: RouterSettings,
        state: DaemonStore,
        kv: Callable[[str], KeyValue],
        sessions: Sessions,
        replies: Replies,
        transports: Mapping[str, Transport],
        file_moves: Mapping[str, Callable[[Attachment], Awaitable[Attachment]]],
        metrics: Metrics,
        speech: Speech | None = None,
    ) -> None:
        self._agent = agent
        self._agents = agents
        self._settings = settings
        self._state = state
        self._kv = kv
        self._sessions = sessions
        self._replies = replies
        self._transports = transports
        self._abilities = {name: Abilities.of(t) for name, t in transports.items()}
        """Each transport's optional abilities, looked up once."""
        self._file_moves = file_moves
        self._metrics = metrics
        self._voices = Voices(
            settings=settings,
            kv=kv,
            speech=speech,
            sends_files=lambda name: bool(
                (self._abilities.get(name) or Abilities()).max_file_bytes
            ),
            queue=lambda t, c, thread, files: replies.notify(
                t, c, "", files=files, thread_id=thread
            ),
        )
        self.running: dict[str, tuple[Inbound, anyio.CancelScope]] = {}
        """The turn running in each session, and the message it answers (what /stop
        cancels)."""

    def agent_of(self, inbound: Inbound) -> Agent:
        return self._agents.get(inbound.agent, self._agent)

    async def ack(self, inbound: Inbound) -> None:
        """The receipt reaction on a message taken in for a turn, where its transport has
        reactions (best effort: a failure costs only the receipt)."""
        reacts = (self._abilities.get(inbound.transport) or Abilities()).reacts
        if reacts is None:
            return
        try:
            with anyio.fail_after(self._settings.send_timeout):
                await reacts.react(inbound, self._settings.acks[inbound.transport])
        except Exception as exc:
            log.info("router.ack_failed", transport=inbound.transport, error=str(exc))

    async def answer(self, inbound: Inbound, *, retried: bool, quiet: bool = False) -> None:
        """A turn for the inbound, its reply queued; where it was `retried` (or replayed),
        what an earlier try left is picked up (an answer it finished is only replied).
        A `quiet` turn shows nothing in the chat before its answer (no typing, no preview)."""
        session = await self._sessions.get(inbound)
        current_inbound.set(inbound)  # this task's context: tools see which chat asked
        paying.set(Payer.of(inbound, session.id))  # and whom its model calls are charged to
        with structlog.contextvars.bound_contextvars(session=session.id):
            progress = Progress()
            if retried:
                progress = await self._state.progress(inbound, session.id)
                if progress.done is not None:  # answered before a stop, never queued
                    log.info("router.turn_already_finished")
                    await self._replies.reply(
                        inbound,
                        progress.done.strip(),
                        files=progress.files,
                        replaces=progress.preview,
                    )
                    return
                if progress.files:
                    await self._state.forget_sent_files(inbound)
            if not progress.appended:
                await self._append_user(session, inbound)
            outgoing = OutgoingFiles(
                transport=inbound.transport,
                keep=functools.partial(self._state.sent_file, inbound),
            )
            outgoing_files.set(outgoing)  # what send_file adds goes out with the answer
            shown_at: list[int] = []
            preview = None if quiet else self._preview(inbound, progress.preview, shown_at)
            try:
                answer = await self._turn(session, inbound, preview, typing=not quiet)
            except StoreError:
                await self._settle_history(inbound, session.id)
                raise
            hint = await self._voices.hint(inbound)
            # Written after the turn's queued history (and failing if that was lost).
            await self._replies.reply(
                inbound,
                answer,
                files=outgoing.files,
                notice=hint,
                replaces=preview.ids if preview is not None else progress.preview,
                # A stopped turn's mark stays where it was: there is no answer to be seen.
                stale=bool(shown_at)
                and shown_at[0] != self._said(inbound)
                and answer != STOPPED_MARK,
                history=session.id,
            )
            await self._voices.replied(inbound, answer, hinted=bool(hint))

    async def _settle_history(self, inbound: Inbound, session_id: str) -> None:
        """A turn failed on the store before its finish: its queued history writes are
        waited for, a lost one reported now with that failure (the retry's finish would
        otherwise fail on it again)."""
        history = self.agent_of(inbound).options.history
        if history is not None:
            with contextlib.suppress(Exception):
                await history.flush(session_id)

    async def _append_user(self, session: Session, inbound: Inbound) -> None:
        """The message joins its session, its files moved into the agent's own workspace
        where that is not the one files arrive in."""
        text = _user_text(inbound)
        content = [Content.of_text(text)] if text or not inbound.attachments else []
        move = self._file_moves.get(inbound.agent)
        for attachment in inbound.attachments:
            content.append(Content.of_attachment(await move(attachment) if move else attachment))
        await self.agent_of(inbound).append(session, Message(role=Role.USER, content=content))
        await self._state.mark_appended(inbound, session.id)

    def _said(self, inbound: Inbound) -> int:
        return self._replies.said(inbound.transport, inbound.chat_id, inbound.thread_id)

    def _preview(self, inbound: Inbound, shown: list[str], shown_at: list[int]) -> Preview | None:
        """A preview for this turn's reply, where its transport streams (continuing the
        messages an earlier try of the turn was shown in). `shown_at` gets the chat's count
        of messages when the preview's first message is made: a reply that finds more than
        that is sent below them, not edited into the preview above."""
        settings = self._settings.streaming.get(inbound.transport)
        can = self._abilities.get(inbound.transport) or Abilities()
        edits = can.edits
        if settings is None or settings.streaming == "off" or edits is None:
            return None
        drafts = can.drafts if settings.streaming == "native" else None
        return Preview(
            transport=edits,
            chat_id=inbound.chat_id,
            thread_id=inbound.thread_id,
            ids=list(shown),
            keep=functools.partial(self._keep_preview, inbound, shown_at),
            drafts=drafts if drafts is not None and not inbound.is_group else None,
            draft_id=zlib.crc32(inbound.message_id.encode()) or 1,
            interval=settings.interval,
            raw=can.raw_previews,
        )

    async def _keep_preview(self, inbound: Inbound, shown_at: list[int], ids: list[str]) -> None:
        if not shown_at and len(ids) == 1:
            shown_at.append(self._said(inbound))
        await self._state.shown_preview(inbound, ids)

    async def _turn(
        self, session: Session, inbound: Inbound, preview: Preview | None, *, typing: bool
    ) -> str:
        """The turn's answer, or an honest apology if the model failed or took too long.
        A store failure propagates: the message is then retried, not answered."""
        started = time.monotonic()
        failure: Exception | None = None
        stopped = False
        async with anyio.create_task_group() as tg:
            # Typing and the preview start when due: most turns end before either is.
            later = _Later(tg)
            if typing:
                later.start(TYPING_AFTER, self._typing, inbound)
            if preview is not None:
                preview.due = functools.partial(later.start, fn=preview.run)
            try:
                with anyio.fail_after(self._settings.turn_timeout):
                    with anyio.CancelScope() as scope:
                        self.running[inbound.session_key] = (inbound, scope)
                        response = await self._stream(session, inbound, preview)
                    stopped = scope.cancelled_caught
            except Exception as exc:  # caught here, not wrapped in the task group's group
                failure = exc
            finally:
                self.running.pop(inbound.session_key, None)
                later.cancel()
                tg.cancel_scope.cancel()
                if preview is not None:
                    preview.due = None  # it holds `later`, which may hold the preview
        if preview is not None:  # the final edit, too, keeps to one update a second
            await preview.settle()
        if stopped:  # /stop: the session keeps what was complete; nothing more is said
            self._metrics.turn_seconds.observe(time.monotonic() - started)
            return STOPPED_MARK if preview is not None and preview.ids else ""
        if isinstance(failure, StoreError):
            raise failure
        if isinstance(failure, BudgetExceededError):  # logged (and the owners told) by the meter
            text = refusal(failure)
        elif isinstance(failure, TimeoutError):
            log.warning("router.turn_timeout", timeout=self._settings.turn_timeout)
            self._metrics.errors.labels(inbound.transport).inc()
            text = TIMEOUT_REPLY
        elif failure is not None:
            log.error("router.turn_failed", exc_info=failure)
            self._metrics.errors.labels(inbound.transport).inc()
            text = FAILED_REPLY
        else:
            text = response.message.text.strip()
            self._metrics.tokens(response.usage)
        self._metrics.turn_seconds.observe(time.monotonic() - started)
        if not text:
            log.info("router.empty_reply")
        return text

    async def _stream(
        self, session: Session, inbound: Inbound, preview: Preview | None
    ) -> Response:
        """Run the turn; with a preview, show the answer (or what a tool does) as it comes."""
        agent = self.agent_of(inbound)
        if preview is None:
            return await agent.turn(session, flush=False)  # the reply's finish flushes
        settings = self._settings.streaming.get(inbound.transport) or StreamSettings()
        progress = settings.shows_progress(inbound.is_group)

        def show(event: StreamEvent) -> None:
            if event.kind is StreamEventKind.TEXT:
                preview.write(event.text)
            elif event.kind is StreamEventKind.TOOL_CALL and event.tool_use is not None:
                if progress:
                    preview.status(status_line(event.tool_use))
            elif event.response is not None:
                preview.next_step()

        token = previewing.set(preview)  # for this turn only: an approval wait shows in it
        status = turn_status.set(preview.status if progress else None)  # sub-agents' steps
        try:
            return await agent.turn(session, on_event=show, flush=False)
        finally:
            turn_status.reset(status)
            previewing.reset(token)

    async def _typing(self, inbound: Inbound) -> None:
        transport = self._transports.get(inbound.transport)
        if transport is None:
            return
        while True:
            try:
                with anyio.fail_after(self._settings.send_timeout):
                    await transport.typing(inbound.chat_id, inbound.thread_id)
            except Exception as exc:
                log.debug("router.typing_failed", error=str(exc))
            await anyio.sleep(TYPING_EVERY)


def _user_text(inbound: Inbound) -> str:
    if inbound.is_group and inbound.sender_name and (inbound.text or inbound.attachments):
        return f"{inbound.sender_name}: {inbound.text}".rstrip()
    return inbound.text
