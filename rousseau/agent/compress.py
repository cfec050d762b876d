"""History compression: long sessions are folded into a summary before the model sees them."""

from __future__ import annotations

import json
from typing import Protocol

import structlog

from rousseau.agent.protocols import Provider
from rousseau.agent.types import Compaction, ContentKind, Message, Request, Session

log = structlog.get_logger("rousseau.agent")

DEFAULT_PROMPT = (
    "You compress chat transcripts. Summarise the conversation below so that an assistant "
    "can carry on from it: keep facts about the user, decisions made, open tasks, file paths, "
    "commands and their outcomes, and anything the user asked to remember. Write plain prose "
    "or short bullet points, no preamble."
)

SUMMARY_HEADER = "[Summary of the earlier conversation]\n\n"
_RESULT_CHARS = 2000


class Flush(Protocol):
    """A step before a compaction: what should outlive the summary is saved elsewhere (the
    memory tool's flush asks the model to keep it in the person's profile)."""

    async def flush(self, session: Session, messages: list[Message]) -> None:
        """`messages`, about to be folded into a summary, looked over once; failures are
        its own to report (the summary is written whatever happens here)."""
        ...


class Compressor(Protocol):
    """Shortens a long session for the model; the store keeps the full history."""

    async def compress(self, session: Session) -> Compaction | None:
        """Rewrite the session in place if it is too long; say what changed, or None."""
        ...


class NoopCompressor:
    """Never compresses."""

    async def compress(self, session: Session) -> Compaction | None:
        return None


class LLMCompressor:
    """Summarises all but the most recent messages with a model once a session grows long.

    The cut never separates a tool call from its result: the kept part starts at a user
    message that carries text, not tool results.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        trigger_messages: int = 60,
        keep_recent: int = 8,
        prompt: str = "",
        flush: Flush | None = None,
    ) -> None:
        if keep_recent < 1 or trigger_messages <= keep_recent:
            raise ValueError("need keep_recent >= 1 and trigger_messages > keep_recent")
        self.provider = provider
        self.trigger_messages = trigger_messages
        self.keep_recent = keep_recent
        self.prompt = prompt or DEFAULT_PROMPT
        self.flush = flush
        """Run on the messages to be summarised, before the summary is asked for."""

    def _cut(self, messages: list[Message]) -> int:
        for i in range(len(messages) - self.keep_recent, 0, -1):
            if messages[i].starts_turn:
                return i
        return 0

    async def compress(self, session: Session) -> Compaction | None:
        messages = session.messages
        if len(messages) <= self.trigger_messages:
            return None
        cut = self._cut(messages)
        if cut < 2:
            return None
        if self.flush is not None:
            try:
                await self.flush.flush(session, messages[:cut])
            except Exception:
                log.exception("agent.flush_failed", session=session.id)
        request = Request(
            session_id=session.id,
            system=self.prompt,
            messages=[Message.user(render_transcript(messages[:cut]))],
        )
        response = await self.provider.complete(request)
        summary = Message.user(SUMMARY_HEADER + response.message.text.strip())
        session.messages = [summary, *messages[cut:]]
        session.cacheable_messages = 1
        log.info("agent.compressed", session=session.id, removed=cut, kept=len(messages) - cut)
        return Compaction(removed=cut, summary=summary)


def render_transcript(messages: list[Message]) -> str:
    """A plain-text transcript for the summariser, tool output trimmed."""
    lines: list[str] = []
    for m in messages:
        for c in m.content:
            if c.kind is ContentKind.TEXT and c.text:
                lines.append(f"{m.role.value}: {c.text}")
            elif c.tool_use is not None:
                args = json.dumps(c.tool_use.input, ensure_ascii=False)
                lines.append(f"assistant called {c.tool_use.name} {args}")
            elif c.tool_result is not None:
                body = c.tool_result.content
                if len(body) > _RESULT_CHARS:
                    body = body[:_RESULT_CHARS] + " [...]"
                tag = "error" if c.tool_result.is_error else "result"
                lines.append(f"tool {tag}: {body}")
    return "\n".join(lines)
