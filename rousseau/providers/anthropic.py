"""Anthropic's Messages API through the official SDK: async, streaming, tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rousseau.agent import (
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

_STOP = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
}


class AnthropicProvider:
    """Streams from the Messages API; sends full tool schemas, `required` included."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        max_tokens: int = 8192,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url or DEFAULT_BASE_URL
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=self.base_url,
            max_retries=max_retries,
            timeout=timeout,
        )

    async def complete(self, request: Request) -> Response:
        try:
            message = await self._client.messages.create(**self._params(request))
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc
        return _response(message)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        try:
            async with self._client.messages.stream(**self._params(request)) as stream:
                async for event in stream:
                    if event.type == "text" and event.text:
                        yield StreamEvent.text_delta(event.text)
                final = await stream.get_final_message()
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc
        yield StreamEvent.final(_response(final))

    async def check(self) -> None:
        """Prove the endpoint answers and the key is accepted (lists one model)."""
        try:
            await self._client.models.list(limit=1)
        except anthropic.APIError as exc:
            raise self._translate(exc) from exc

    async def aclose(self) -> None:
        await self._client.close()

    def _params(self, request: Request) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [_message(m) for m in request.messages],
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        return params

    def _translate(self, exc: Exception) -> ProviderError:
        if isinstance(exc, anthropic.APIStatusError):
            return status_error(
                self.name,
                exc.status_code,
                error_message(exc.body, exc.message),
                section="anthropic",
                model=self.model,
                env="ANTHROPIC_API_KEY",
            )
        if isinstance(exc, anthropic.APIConnectionError):
            timeout = isinstance(exc, anthropic.APITimeoutError)
            return connection_error(self.name, self.base_url, section="anthropic", timeout=timeout)
        return ProviderError(self.name, str(exc))


def _message(message: Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for c in message.content:
        if c.tool_use is not None:
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
