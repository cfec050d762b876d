"""Anthropic's Messages API through the official SDK: async, streaming, tools, prompt caching.

`MessagesProvider` holds what the direct API, Bedrock and Vertex share (they speak the same
Messages API through the SDK's three clients); only the client and the error hints differ.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator
from typing import Any

from rousseau.agent import (
    Attachment,
    Content,
    Message,
    MissingExtraError,
    ProviderError,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    ToolUse,
    Usage,
)
from rousseau.providers.errors import connection_error, error_message, status_error

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the anthropic provider", "anthropic") from exc

DEFAULT_BASE_URL = "https://api.anthropic.com"
MAX_CACHE_BREAKPOINTS = 4  # the API's limit per request
_EPHEMERAL = {"type": "ephemeral"}

_STOP = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
}


class MessagesProvider:
    """A provider speaking the Messages API through one of the SDK's async clients."""

    name = "anthropic"
    key_hint = "check anthropic.api_key or ANTHROPIC_API_KEY"

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        max_tokens: int,
        base_url: str,
        prompt_caching: bool = True,
        vision: bool = True,
    ) -> None:
        self._client = client
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url
        self.prompt_caching = prompt_caching
        self.vision = vision

    async def complete(self, request: Request) -> Response:
        try:
            message = await self._client.messages.create(**self.params(request))
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc
        return _response(message)

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        try:
            async with self._client.messages.stream(**self.params(request)) as stream:
                async for event in stream:
                    if event.type == "text" and event.text:
                        yield StreamEvent.text_delta(event.text)
                final = await stream.get_final_message()
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc
        yield StreamEvent.final(_response(final))

    async def check(self) -> None:
        """Prove the endpoint answers and the credentials are accepted (a one-token request)."""
        await self.complete(
            Request(session_id="doctor", system="", messages=[Message.user("ping")])
        )

    async def aclose(self) -> None:
        await self._client.close()

    def params(self, request: Request) -> dict[str, Any]:
        """The request body: full tool schemas and, when caching, cache breakpoints."""
        media = request.media if self.vision else {}
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [_message(m, media) for m in request.messages],
        }
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        if tools:
            params["tools"] = tools
        if request.system:
            params["system"] = [{"type": "text", "text": request.system}]
        if self.prompt_caching:
            _mark_cache_breakpoints(params, request)
        return params

    def _translate(self, exc: Exception) -> ProviderError:
        if isinstance(exc, anthropic.APIStatusError):
            return status_error(
                self.name,
                exc.status_code,
                error_message(exc.body, exc.message),
                model=self.model,
                key_hint=self.key_hint,
                section=self.name,
                retry_after=exc.response.headers.get("retry-after"),
            )
        if isinstance(exc, anthropic.APIConnectionError):
            timeout = isinstance(exc, anthropic.APITimeoutError)
            return connection_error(self.name, self.base_url, section=self.name, timeout=timeout)
        return ProviderError(self.name, str(exc))


class AnthropicProvider(MessagesProvider):
    """The Messages API at api.anthropic.com (or a compatible `base_url`)."""

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        max_tokens: int = 8192,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        prompt_caching: bool = True,
        vision: bool = True,
    ) -> None:
        url = base_url or DEFAULT_BASE_URL
        client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=url, max_retries=max_retries, timeout=timeout
        )
        super().__init__(
            client,
            model=model,
            max_tokens=max_tokens,
            base_url=url,
            prompt_caching=prompt_caching,
            vision=vision,
        )

    async def check(self) -> None:
        """Lists one model: proves the endpoint answers and the key is accepted, for free."""
        try:
            await self._client.models.list(limit=1)
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc


def cache_breakpoints(request: Request) -> list[int]:
    """Indexes of messages to end a cached prefix at, most stable first.

    The compressor's summary prefix, the last message of the previous turn (the stable
    history) and the newest message (so the next iteration of a tool loop reads the cache).
    """
    messages = request.messages
    points: list[int] = []
    if request.cacheable_messages > 0:
        points.append(min(request.cacheable_messages, len(messages)) - 1)
    turn_start = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].starts_turn),
        None,
    )
    if turn_start is not None and turn_start > 0:
        points.append(turn_start - 1)
    if messages:
        points.append(len(messages) - 1)
    return sorted(set(points))


def _mark_cache_breakpoints(params: dict[str, Any], request: Request) -> None:
    budget = MAX_CACHE_BREAKPOINTS
    # Tools come first in the cached prefix, then the system prompt: one mark covers both.
    if "system" in params:
        params["system"][-1]["cache_control"] = _EPHEMERAL
        budget -= 1
    elif "tools" in params:
        params["tools"][-1]["cache_control"] = _EPHEMERAL
        budget -= 1
    points = cache_breakpoints(request)
    # Over budget, drop the oldest marks: the newest prefix is the longest and most useful.
    for index in points[-budget:] if budget > 0 else []:
        params["messages"][index]["content"][-1]["cache_control"] = _EPHEMERAL


_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""What the Messages API takes as an image block; PDFs go as document blocks."""


def _message(message: Message, media: dict[str, bytes]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for c in message.content:
        if c.attachment is not None:
            blocks.append(_attachment(c.attachment, media))
        elif c.tool_use is not None:
            u = c.tool_use
            blocks.append({"type": "tool_use", "id": u.id, "name": u.name, "input": u.input})
        elif c.tool_result is not None:
            r = c.tool_result
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": r.tool_use_id,
                    "content": r.content or "(no output)",
                    "is_error": r.is_error,
                }
            )
        elif c.text:
            blocks.append({"type": "text", "text": c.text})
    if not blocks:
        blocks.append({"type": "text", "text": "(empty)"})
    return {"role": message.role.value, "content": blocks}


def _attachment(attachment: Attachment, media: dict[str, bytes]) -> dict[str, Any]:
    """An image or PDF block with the file's bytes; the stand-in text for anything else, or
    when the bytes are not at hand (a model without vision is given none)."""
    data = media.get(attachment.sha256)
    kind = (
        "image"
        if attachment.media_type in _IMAGE_TYPES
        else "document"
        if attachment.media_type == "application/pdf"
        else None
    )
    if data is None or kind is None:
        return {"type": "text", "text": attachment.stand_in()}
    source = {
        "type": "base64",
        "media_type": attachment.media_type,
        "data": base64.b64encode(data).decode("ascii"),
    }
    return {"type": kind, "source": source}


def _response(message: Any) -> Response:
    content: list[Content] = []
    for block in message.content:
        if block.type == "text":
            content.append(Content.of_text(block.text))
        elif block.type == "tool_use":
            content.append(
                Content.of_tool_use(
                    ToolUse(id=block.id, name=block.name, input=dict(block.input or {}))
                )
            )
    u = message.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=getattr(u, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(u, "cache_creation_input_tokens", None) or 0,
    )
    return Response(
        message=Message(role=Role.ASSISTANT, content=content),
        stop_reason=_STOP.get(message.stop_reason or "", StopReason.OTHER),
        usage=usage,
    )
