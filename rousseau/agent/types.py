"""The conversation model shared by the loop, providers, store and transports."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """Who wrote a message: the user (tool results included) or the assistant."""

    USER = "user"
    ASSISTANT = "assistant"


class ContentKind(StrEnum):
    """What one content block holds: text, a tool call, a tool result, or a file (an image,
    or a document such as a PDF) by reference."""

    TEXT = "text"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    IMAGE = "image"
    DOCUMENT = "document"


class StopReason(StrEnum):
    """Why the model stopped: the turn ended, it wants tools, or it hit a limit."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    OTHER = "other"


@dataclass(kw_only=True, slots=True)
class ToolUse:
    """A tool call the model asked for."""

    id: str
    """The provider's id for this call; the matching result carries it back."""
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    """The arguments as the model sent them, already decoded from JSON."""

    def input_json(self) -> str:
        """The input as compact JSON, the form approver patterns are matched against."""
        return json.dumps(self.input, separators=(",", ":"), ensure_ascii=False)


@dataclass(kw_only=True, slots=True)
class ToolResult:
    """What a tool call produced, or why it did not run."""

    tool_use_id: str
    content: str
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    """Files the tool gave the model with it: they follow the results in the same message,
    as blocks of their own (what a provider can take there)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Attachment:
    """A file a message carries, by reference: its bytes live in a blob store under their
    sha256 (a `MediaSource` reads them back), never in the message itself."""

    sha256: str
    media_type: str
    """The MIME type, e.g. image/jpeg or application/pdf."""
    size: int
    """In bytes."""
    name: str = ""
    """The file's name as it was sent (for people; never used as a path)."""
    saved_as: str = ""
    """Where the agent's tools find a copy: a path relative to the workspace, or empty."""
    voice: bool = False
    """A voice note to send (OGG/Opus): sent as the platform's own voice message."""
    duration: float = 0.0
    """A voice note's seconds."""
    waveform: bytes = b""
    """A voice note's loudness, bar by bar (0-255), for the platforms that draw it."""

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    def stand_in(self) -> str:
        """The text a model that cannot take this file is shown in its place."""
        major = self.media_type.partition("/")[0]
        what = {"image": "photo", "audio": "audio", "video": "video"}.get(major, "file")
        parts = [f"{what}: {self.name or self.media_type}", _size(self.size)]
        if self.saved_as:
            parts.append(f"saved as {self.saved_as}")
        return "[" + ", ".join(parts) + "]"


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    if n < 1_000_000:
        return f"{n / 1000:.0f} kB"
    return f"{n / 1_000_000:.1f} MB"


@dataclass(kw_only=True, slots=True)
class Content:
    """One block of a message: text, a tool call, a tool result or an attached file."""

    kind: ContentKind
    text: str = ""
    tool_use: ToolUse | None = None
    tool_result: ToolResult | None = None
    attachment: Attachment | None = None

    @classmethod
    def of_text(cls, text: str) -> Content:
        return cls(kind=ContentKind.TEXT, text=text)

    @classmethod
    def of_tool_use(cls, tool_use: ToolUse) -> Content:
        return cls(kind=ContentKind.TOOL_USE, tool_use=tool_use)

    @classmethod
    def of_tool_result(cls, result: ToolResult) -> Content:
        return cls(kind=ContentKind.TOOL_RESULT, tool_result=result)

    @classmethod
    def of_attachment(cls, attachment: Attachment) -> Content:
        kind = ContentKind.IMAGE if attachment.is_image else ContentKind.DOCUMENT
        return cls(kind=kind, attachment=attachment)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, used by the store."""
        if self.attachment is not None:
            a = self.attachment
            found: dict[str, Any] = {
                "type": self.kind.value,
                "sha256": a.sha256,
                "media_type": a.media_type,
                "size": a.size,
                "name": a.name,
                "saved_as": a.saved_as,
            }
            if a.voice:
                found |= {"voice": True, "duration": a.duration, "waveform": list(a.waveform)}
            return found
        if self.tool_use is not None:
            u = self.tool_use
            return {"type": "tool_use", "id": u.id, "name": u.name, "input": u.input}
        if self.tool_result is not None:
            r = self.tool_result
            return {
                "type": "tool_result",
                "tool_use_id": r.tool_use_id,
                "content": r.content,
                "is_error": r.is_error,
            }
        return {"type": "text", "text": self.text}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Content:
        kind = data.get("type")
        if kind == "tool_use":
            return cls.of_tool_use(
                ToolUse(id=data["id"], name=data["name"], input=dict(data.get("input") or {}))
            )
        if kind == "tool_result":
            return cls.of_tool_result(
                ToolResult(
                    tool_use_id=data["tool_use_id"],
                    content=data.get("content", ""),
                    is_error=bool(data.get("is_error", False)),
                )
            )
        if kind in (ContentKind.IMAGE.value, ContentKind.DOCUMENT.value):
            return cls.of_attachment(
                Attachment(
                    sha256=data["sha256"],
                    media_type=data["media_type"],
                    size=int(data.get("size", 0)),
                    name=data.get("name", ""),
                    saved_as=data.get("saved_as", ""),
                    voice=bool(data.get("voice", False)),
                    duration=float(data.get("duration", 0.0)),
                    waveform=bytes(data.get("waveform") or b""),
                )
            )
        return cls.of_text(data.get("text", ""))


@dataclass(kw_only=True, slots=True)
class Message:
    """One turn of the conversation: a user or an assistant message of content blocks."""

    role: Role
    content: list[Content] = field(default_factory=list)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role=Role.USER, content=[Content.of_text(text)])

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role=Role.ASSISTANT, content=[Content.of_text(text)])

    @property
    def text(self) -> str:
        """The text blocks joined, without tool calls or results."""
        return "".join(c.text for c in self.content if c.kind is ContentKind.TEXT)

    @property
    def tool_uses(self) -> list[ToolUse]:
        return [c.tool_use for c in self.content if c.tool_use is not None]

    @property
    def tool_results(self) -> list[ToolResult]:
        return [c.tool_result for c in self.content if c.tool_result is not None]

    @property
    def attachments(self) -> list[Attachment]:
        return [c.attachment for c in self.content if c.attachment is not None]

    @property
    def starts_turn(self) -> bool:
        """A user message that says something (not only tool results): a history cut here
        separates no tool call from its result."""
        return self.role is Role.USER and not self.tool_results


@dataclass(kw_only=True, slots=True)
class Session:
    """A conversation: its id and its messages, oldest first."""

    id: str
    messages: list[Message] = field(default_factory=list)
    cacheable_messages: int = 0
    """How many leading messages form a stable prefix (set by a compressor)."""
    checked: tuple[int, Message] | None = field(default=None, repr=False, compare=False)
    """Set by the agent loop: its first n messages, ending with this one, were made valid
    by repair_history. While the session still begins with them, only what follows is
    checked again: a turn costs the same in a long session as in a short one."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Compaction:
    """What a compressor did: the first `removed` messages of a session became `summary`."""

    removed: int
    summary: Message


@dataclass(kw_only=True, slots=True)
class ToolDefinition:
    """What the model is told about a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    """A JSON schema object, `required` included."""


@dataclass(kw_only=True, slots=True)
class Usage:
    """Token counts a provider reports for one request."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(kw_only=True, slots=True)
class Request:
    """Everything a provider needs for one completion."""

    session_id: str
    system: str
    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    cacheable_messages: int = 0
    """Leading messages that form a stable prefix a provider may mark for prompt caching."""
    media: dict[str, bytes] = field(default_factory=dict)
    """The bytes of the messages' attachments, by sha256, where the loop could read them;
    a provider shows an attachment missing here by its stand-in text."""


@dataclass(kw_only=True, slots=True)
class Response:
    """One completion: the assistant message, why it stopped and what it cost."""

    message: Message
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)


class StreamEventKind(StrEnum):
    """What a streamed event carries: text, a tool call, a tool result or a response."""

    TEXT = "text"
    """A text delta as the model writes it."""
    TOOL_CALL = "tool_call"
    """The model asked for a tool; it is about to be checked and run."""
    TOOL_RESULT = "tool_result"
    """A tool call finished, was denied or failed."""
    RESPONSE = "response"
    """A provider's complete response for one iteration."""


@dataclass(kw_only=True, slots=True)
class StreamEvent:
    """One thing that happened during a streamed turn."""

    kind: StreamEventKind
    text: str = ""
    tool_use: ToolUse | None = None
    tool_result: ToolResult | None = None
    denied: bool = False
    """On TOOL_RESULT: the approver refused the call (the result says why)."""
    response: Response | None = None

    @classmethod
    def text_delta(cls, text: str) -> StreamEvent:
        return cls(kind=StreamEventKind.TEXT, text=text)

    @classmethod
    def final(cls, response: Response) -> StreamEvent:
        return cls(kind=StreamEventKind.RESPONSE, response=response)
