"""The agent loop: ask the model, run the tools it asks for, repeat until it answers."""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import anyio
import structlog

from rousseau.agent.approval import (
    ApprovalRequest,
    Approver,
    Decision,
    default_rules,
    input_changed,
    input_digest,
)
from rousseau.agent.compress import Compressor, NoopCompressor
from rousseau.agent.errors import (
    EmptySessionError,
    MaxIterationsError,
    ProviderError,
    ToolNotFoundError,
)
from rousseau.agent.protocols import (
    AuditLog,
    MediaSource,
    MessageLog,
    ProfileProvider,
    Provider,
    RecallProvider,
    SkillsProvider,
    ToolBox,
    ToolCall,
    ToolCallRecord,
    streams,
)
from rousseau.agent.repair import repair_history
from rousseau.agent.types import (
    Content,
    Message,
    Request,
    Response,
    Role,
    Session,
    StopReason,
    StreamEvent,
    StreamEventKind,
    ToolResult,
    ToolUse,
    Usage,
)

log = structlog.get_logger("rousseau.agent")

DEFAULT_MAX_ITERATIONS = 32


@dataclass(kw_only=True, slots=True)
class Options:
    """How an Agent behaves; every field has a sensible default."""

    system_prompt: str = ""
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    """Model calls per turn at most; 0 means the default (32)."""
    approver: Approver = field(default_factory=default_rules)
    """Decides every tool call. The default allows read, grep and memory and denies the
    rest."""
    compressor: Compressor = field(default_factory=NoopCompressor)
    history_window: int = 0
    """Past this many messages, a session's older half is left out of what the model is
    shown and of what is held in memory (the history keeps it); 0: no window."""
    skills: SkillsProvider | None = None
    recall: RecallProvider | None = None
    profile: ProfileProvider | None = None
    """What the agent keeps about the person it answers, shown right after the system
    prompt (it changes seldom: the start of the request stays cacheable)."""
    history: MessageLog | None = None
    """Where every message the loop adds is persisted, if anywhere."""
    audit: AuditLog | None = None
    """Where every tool call is recorded, if anywhere."""
    media: MediaSource | None = None
    """Where attachments' bytes are read from for each request; without one, providers
    show attachments by their stand-in text."""


class Agent:
    """Runs turns of a session against a provider, with tools under an approver.

    One Agent serves many sessions concurrently; it keeps no per-session state.
    """

    def __init__(
        self,
        provider: Provider,
        tools: ToolBox | None = None,
        options: Options | None = None,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self.options = options or Options()

    async def reply(self, session: Session, text: str, *, unattended: bool = False) -> Response:
        """Add a user message to the session (persisting it) and run a turn."""
        await self.append(session, Message.user(text))
        return await self.turn(session, unattended=unattended)

    async def turn(
        self,
        session: Session,
        *,
        unattended: bool = False,
        on_event: Callable[[StreamEvent], None] | None = None,
        flush: bool = True,
    ) -> Response:
        """Run the loop until the model stops; return the last response, usage summed.
        `on_event` sees each event of the turn's stream as it comes (see turn_stream)."""
        last: Response | None = None
        usage = Usage()
        stream = self.turn_stream(session, unattended=unattended, flush=flush)
        async with aclosing(stream) as events:
            async for event in events:
                if on_event is not None:
                    on_event(event)
                if event.response is not None:
                    last = event.response
                    usage = usage + last.usage
        assert last is not None  # turn_stream yields a RESPONSE per iteration or raises
        return Response(message=last.message, stop_reason=last.stop_reason, usage=usage)

    async def turn_stream(
        self, session: Session, *, unattended: bool = False, flush: bool = True
    ) -> AsyncGenerator[StreamEvent, None]:
        """Run the loop, yielding text deltas, tool calls, tool results and responses.

        The history's queued writes are flushed before it returns or raises; `flush=False`
        leaves that to the caller's next write, which must fail if one of them did (the
        daemon's router finishes a turn that way, in one round trip to the database)."""
        if not session.messages:
            raise EmptySessionError()
        try:
            await self._prepare(session)
            definitions = self.tools.definitions() if self.tools is not None else []
            limit = self.options.max_iterations or DEFAULT_MAX_ITERATIONS
            for _ in range(limit):
                request = Request(
                    session_id=session.id,
                    system=await self._system_prompt(session),
                    messages=list(session.messages),
                    tools=definitions,
                    cacheable_messages=session.cacheable_messages,
                    media=await self._media(session.messages),
                )
                response: Response | None = None
                # aclosing: if our consumer stops early, the provider's stream closes now.
                async with aclosing(self._complete(request)) as events:
                    async for event in events:
                        if event.kind is StreamEventKind.RESPONSE:
                            response = event.response
                        else:
                            yield event
                assert response is not None
                await self.append(session, response.message, usage=response.usage)
                yield StreamEvent.final(response)
                uses = response.message.tool_uses
                if not uses:
                    return
                if response.stop_reason is not StopReason.TOOL_USE:
                    # A reply cut off mid-call: close the calls so the history stays valid.
                    reason = f"not run: the reply stopped early ({response.stop_reason.value})"
                    await self.append(session, _results_message(uses, [], reason))
                    return
                results: list[ToolResult] = []
                try:
                    for batch in self._batches(uses):
                        for use in batch:
                            yield StreamEvent(kind=StreamEventKind.TOOL_CALL, tool_use=use)
                        for result, denied in await self._run_batch(session, batch, unattended):
                            results.append(result)
                            yield StreamEvent(
                                kind=StreamEventKind.TOOL_RESULT, tool_result=result, denied=denied
                            )
                except BaseException:
                    # Cancelled between calls: record what ran and close the rest, so the session
                    # can be continued without a dangling tool call.
                    with anyio.CancelScope(shield=True):
                        await self.append(session, _results_message(uses, results, "cancelled"))
                    raise
                await self.append(session, _results_message(uses, results, "cancelled"))
            raise MaxIterationsError(limit)
        finally:
            # Queued writes reach the disk before the turn is reported done (or failed).
            if flush and self.options.history is not None:
                with anyio.CancelScope(shield=True):
                    await self.options.history.flush(session.id)

    async def _prepare(self, session: Session) -> None:
        """Make the history valid, then compress it if it grew too long."""
        repaired = repair_history(session.messages, start=_unchecked(session))
        session.checked = (len(session.messages), session.messages[-1])
        if repaired:
            log.warning("agent.history_repaired", session=session.id, fixes=repaired)
        compaction = await self.options.compressor.compress(session)
        if compaction is not None:
            session.checked = None  # the next turn checks the new history whole
            if self.options.history is not None:
                await self.options.history.compact(session.id, compaction)
        if _window(session, self.options.history_window):
            session.checked = None

    async def _complete(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        provider = self.provider
        if streams(provider):
            seen = False
            async with aclosing(provider.stream(request)) as stream:
                async for event in stream:
                    seen = seen or event.kind is StreamEventKind.RESPONSE
                    yield event
            if not seen:
                raise ProviderError(provider.name, "the stream ended without a complete reply")
            return
        response = await provider.complete(request)
        if response.message.text:
            yield StreamEvent.text_delta(response.message.text)
        yield StreamEvent.final(response)

    async def _media(self, messages: list[Message]) -> dict[str, bytes]:
        """The bytes of every attachment in the messages that the media source still has."""
        source = self.options.media
        if source is None:
            return {}
        # Plain loops over the content blocks, before any await: the scan runs for every
        # request, over the whole history, and most sessions have no attachment at all.
        wanted: dict[str, None] = {}
        for message in messages:
            for content in message.content:
                if content.attachment is not None:
                    wanted[content.attachment.sha256] = None
        found: dict[str, bytes] = {}
        for sha256 in wanted:
            data = await source.read(sha256)
            if data is not None:
                found[sha256] = data
        return found

    async def _system_prompt(self, session: Session) -> str:
        parts = [self.options.system_prompt]
        if self.options.profile is not None:
            parts.append(await self.options.profile.appendix(session))
        if self.options.skills is not None:
            parts.append(await self.options.skills.appendix(session))
        if self.options.recall is not None:
            parts.append(await self.options.recall.appendix(session))
        return "\n\n".join(p.strip() for p in parts if p and p.strip())

    async def append(self, session: Session, message: Message, usage: Usage | None = None) -> None:
        """Add a message to the session and to the history, if there is one."""
        session.messages.append(message)
        if self.options.history is not None:
            await self.options.history.append_message(session.id, message, usage)

    def _batches(self, uses: list[ToolUse]) -> list[list[ToolUse]]:
        """The calls in order, those next to each other that may run side by side (a tool
        saying `parallel`, such as delegate) together, each other call alone."""
        batches: list[list[ToolUse]] = []
        side_by_side = False
        for use in uses:
            parallel = self._parallel(use.name)
            if parallel and side_by_side:
                batches[-1].append(use)
            else:
                batches.append([use])
            side_by_side = parallel
        return batches

    def _parallel(self, name: str) -> bool:
        if self.tools is None:
            return False
        try:
            return getattr(self.tools.get(name), "parallel", False) is True
        except ToolNotFoundError:
            return False

    async def _run_batch(
        self, session: Session, batch: list[ToolUse], unattended: bool
    ) -> list[tuple[ToolResult, bool]]:
        """Run the calls of a batch, side by side where there are several; results in order."""
        if len(batch) == 1:
            return [await self._run_tool(session, batch[0], unattended=unattended)]
        done: dict[int, tuple[ToolResult, bool]] = {}

        async def one(i: int, use: ToolUse) -> None:
            done[i] = await self._run_tool(session, use, unattended=unattended)

        async with anyio.create_task_group() as tg:
            for i, use in enumerate(batch):
                tg.start_soon(one, i, use)
        return [done[i] for i in range(len(batch))]

    async def _run_tool(
        self, session: Session, use: ToolUse, *, unattended: bool
    ) -> tuple[ToolResult, bool]:
        return await run_tool(
            self.tools,
            self.options.approver,
            session.id,
            use,
            unattended=unattended,
            audit=self.options.audit,
        )


def _window(session: Session, limit: int) -> bool:
    """Past `limit` messages, keep the newer half (and a summary at the start): cut at a user
    message with text, so no tool call loses its result. Half, not all but `limit`, so the
    start stays put for many turns (providers cache a request's unchanged start)."""
    messages = session.messages
    if not limit or len(messages) <= limit:
        return False
    head = 1 if session.cacheable_messages else 0  # a summary stays first
    start = max(head + 1, len(messages) - limit // 2)
    later = range(start, len(messages))
    earlier = range(start - 1, head, -1)
    for i in itertools.chain(later, earlier):
        if messages[i].starts_turn:
            log.info("agent.history_windowed", session=session.id, left_out=i - head)
            session.messages = [*messages[:head], *messages[i:]]
            return True
    return False


def _unchecked(session: Session) -> int:
    """Where repair_history must start: at the last message it checked, if the session still
    begins with what it checked (a compaction or a reload starts it over)."""
    if session.checked is None:
        return 0
    count, last = session.checked
    if count <= len(session.messages) and session.messages[count - 1] is last:
        return count - 1  # its answer (or the lack of one) may have come since
    return 0


async def run_tool(
    tools: ToolBox | None,
    approver: Approver,
    session_id: str,
    use: ToolUse,
    *,
    unattended: bool = False,
    audit: AuditLog | None = None,
) -> tuple[ToolResult, bool]:
    """One tool call as the loop makes it: find the tool, check its input, ask the approver,
    run it, and record it in `audit`. Every failure becomes an error result; the flag says
    whether it was denied. (The MCP server runs calls through here too.)"""
    started = time.time()
    clock = time.monotonic()
    decided: list[Decision] = []

    async def record(verdict: str, by: str, reason: str, outcome: str) -> None:
        if audit is None:
            return
        entry = ToolCallRecord(
            session_id=session_id,
            tool=use.name,
            input_digest=input_digest(use)[:16],
            decision=verdict,
            decided_by=by,
            reason=reason,
            started_at=started,
            duration=time.monotonic() - clock,
            outcome=outcome,
        )
        try:
            await audit.record_tool_call(entry)
        except Exception:
            log.exception("agent.audit_failed", session=session_id, tool=use.name)

    try:
        result, decision = await _attempt(tools, approver, session_id, use, unattended, decided)
    except anyio.get_cancelled_exc_class():
        # The turn was stopped (Ctrl-C, a deadline, shutdown): the call is in the audit too.
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            if decided:
                verdict = "allow" if decided[0].allow else "deny"
                await record(verdict, decided[0].by, decided[0].reason, "cancelled")
            else:
                await record("deny", "cancelled", "stopped before anyone decided", "cancelled")
        raise
    if decision is None:
        await record("invalid", "", result.content[:200], "error")
    elif not decision.allow:
        await record("deny", decision.by, decision.reason, "denied")
    else:
        await record("allow", decision.by, decision.reason, "error" if result.is_error else "ok")
    return result, decision is not None and not decision.allow


async def _attempt(
    tools: ToolBox | None,
    approver: Approver,
    session_id: str,
    use: ToolUse,
    unattended: bool,
    decided: list[Decision],
) -> tuple[ToolResult, Decision | None]:
    """The call itself; the decision is None when it never reached the approver. The
    decision is also put in `decided` the moment it is made (for a call cut short)."""

    def error(text: str) -> ToolResult:
        return ToolResult(tool_use_id=use.id, content=text, is_error=True)

    try:
        if tools is None:
            raise ToolNotFoundError(use.name)
        tool = tools.get(use.name)
    except ToolNotFoundError as exc:
        log.warning("agent.tool_not_found", session=session_id, tool=use.name)
        return error(str(exc)), None
    problem = tool.validate(use.input)
    if problem:
        return error(f"invalid input for {use.name}: {problem}"), None
    request = ApprovalRequest(session_id=session_id, tool_use=use, unattended=unattended)
    asked = input_digest(use)
    try:
        decision = await approver.approve(request)
    except Exception as exc:
        log.exception("agent.approver_failed", session=session_id, tool=use.name)
        failed = Decision.denied(f"the approver failed ({exc})", by="approver error")
        return error(f"denied: {failed.reason}"), failed
    if decision.allow:
        # What runs is what was approved: the input is the one put to the approver (and, for a
        # decision bound to a digest, the one the person saw), checked with no await between.
        now = input_digest(use)
        if now != asked or decision.digest not in ("", now):
            log.warning("agent.input_changed", session=session_id, tool=use.name, by=decision.by)
            decision = input_changed(decision.by)
    decided.append(decision)
    if not decision.allow:
        log.info("agent.tool_denied", session=session_id, tool=use.name, by=decision.by)
        return error(f"denied: {decision.reason or 'not approved'}"), decision
    call = ToolCall(session_id=session_id, tool_use_id=use.id, meta={"unattended": unattended})
    try:
        # A copy of the checked input: nothing that still holds the original can change it now.
        output = await tool.execute(copy.deepcopy(use.input), call)
    except Exception as exc:
        log.exception("agent.tool_failed", session=session_id, tool=use.name)
        return error(f"{use.name} failed: {type(exc).__name__}: {exc}"), decision
    log.info("agent.tool_ran", session=session_id, tool=use.name, is_error=output.is_error)
    return ToolResult(
        tool_use_id=use.id,
        content=output.content,
        is_error=output.is_error,
        attachments=output.attachments,
    ), decision


def _results_message(uses: list[ToolUse], results: list[ToolResult], missing: str) -> Message:
    """One user message with a result per call; calls without one get `missing` as an error."""
    done = {r.tool_use_id: r for r in results}
    content = [
        Content.of_tool_result(
            done.get(u.id) or ToolResult(tool_use_id=u.id, content=missing, is_error=True)
        )
        for u in uses
    ]
    # files after every result: OpenAI's tool messages and Anthropic's results come first
    content += [Content.of_attachment(a) for r in results for a in r.attachments]
    return Message(role=Role.USER, content=content)
