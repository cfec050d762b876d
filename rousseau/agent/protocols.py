"""The interfaces the loop depends on; adapters implement them without subclassing."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable

from rousseau.agent.types import (
    Attachment,
    Compaction,
    Message,
    Request,
    Response,
    Session,
    StreamEvent,
    ToolDefinition,
    Usage,
)


@runtime_checkable
class Provider(Protocol):
    """A model backend: one request in, one complete response out."""

    name: str

    async def complete(self, request: Request) -> Response: ...


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A provider that can also stream: TEXT deltas, then exactly one RESPONSE event last."""

    def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]: ...


def streams(provider: Provider) -> TypeGuard[StreamingProvider]:
    """What `isinstance(provider, StreamingProvider)` answers, at a hundredth of its cost on
    Python 3.11 (which walks the protocol's members each time): it is asked at every model
    call."""
    return callable(getattr(provider, "stream", None))


@dataclass(kw_only=True, slots=True)
class ToolOutput:
    """What a tool returns to the loop."""

    content: str
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    """Files (already in the blob store) the model is shown with the result: a screenshot."""


@dataclass(kw_only=True, slots=True)
class ToolCall:
    """The context a tool runs in: which session asked, and with which call."""

    session_id: str
    tool_use_id: str
    meta: dict[str, Any] = field(default_factory=dict)


class ToolHandler(Protocol):
    """One runnable tool as the loop sees it (rousseau.tools.Tool implements this)."""

    @property
    def name(self) -> str: ...

    def validate(self, input: dict[str, Any]) -> str | None:
        """Check the input against the tool's schema; return the problem, or None."""
        ...

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput: ...


class ToolBox(Protocol):
    """A set of tools (rousseau.tools.Registry implements this)."""

    def get(self, name: str) -> ToolHandler:
        """Return the tool or raise ToolNotFoundError."""
        ...

    def definitions(self) -> list[ToolDefinition]: ...


class SkillsProvider(Protocol):
    """Supplies the skills appendix of the system prompt for a turn."""

    async def appendix(self, session: Session) -> str: ...


class RecallProvider(Protocol):
    """Supplies remembered snippets from other sessions for a turn."""

    async def appendix(self, session: Session) -> str: ...


class ProfileProvider(Protocol):
    """Supplies what the agent keeps about the person the turn answers (their profile)."""

    async def appendix(self, session: Session) -> str: ...


class MediaSource(Protocol):
    """Reads back the bytes of an attachment by its sha256; None when they are gone."""

    async def read(self, sha256: str) -> bytes | None: ...


@dataclass(kw_only=True, slots=True, frozen=True)
class ToolCallRecord:
    """One tool call as the audit trail keeps it (the input only as a digest)."""

    session_id: str
    tool: str
    input_digest: str
    decision: str
    """allow, deny, or invalid (bad input, unknown tool: never reached the approver)."""
    decided_by: str
    reason: str
    started_at: float
    duration: float
    outcome: str
    """ok, error or denied."""


class AuditLog(Protocol):
    """Where every tool call is recorded (the Store implements it)."""

    async def record_tool_call(self, record: ToolCallRecord) -> None: ...


class MessageLog(Protocol):
    """Durable history: the loop appends every message it adds to a session.

    `append_message` may queue the write, as long as writes stay in order; the loop calls
    `flush` before a turn returns or raises, so a finished turn is on disk (unless its caller
    asked for `flush=False`, to check those writes with its own next one).
    """

    async def append_message(
        self, session_id: str, message: Message, usage: Usage | None = None
    ) -> None:
        """Persist a message; `usage` is what the model call that produced it cost."""
        ...

    async def flush(self, session_id: str | None = None) -> None:
        """Wait for queued writes; raise if one of the session's writes could not be made,
        so a turn whose history is not on disk never counts as finished."""
        ...

    async def compact(self, session_id: str, compaction: Compaction) -> None:
        """Record that a compressor folded the oldest messages into a summary."""
        ...
