"""OpenAI-compatible chat completions (OpenAI, OpenRouter, Ollama, vLLM) via the official SDK."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, cast

from rousseau.agent import (
    Content,
    ContentKind,
    Message,
    MissingExtraError,
    ProviderError,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    ToolResult,
    ToolUse,
    Usage,
)
from rousseau.providers.errors import connection_error, error_message, status_error

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the openai provider", "openai") from exc

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_ENV = {"openai": "OPENAI_API_KEY", "openrouter": "OPENROUTER_API_KEY"}


class OpenAIProvider:
    """Chat completions with streamed text and tool-call deltas.

    `name` is the config section it was built from (openai, openrouter, ollama); they differ
    only in defaults.
    """

    def __init__(
        self,
        *,
        name: str = "openai",
        api_key: str | None,
        model: str,
        base_url: str | None = None,
        max_tokens: int = 4096,
        max_retries: int = 2,
        timeout: float = 600.0,
        vision: bool = True,
    ) -> None:
        self.name = name
        self.vision = vision
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url or DEFAULT_BASE_URL
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "unused",
            base_url=self.base_url,
            max_retries=max_retries,
            timeout=timeout,
            http_client=_http_client(timeout),
        )

    # Requests go through the SDK's own `post` (its client, retries, auth and parsing) with
    # the JSON body built here: `chat.completions.create` would first rewrite every request
    # against its typed parameters, 3-12 ms of CPU per call, growing with the session.
    # Replies stay the JSON objects they arrive as (`cast_to=object` is the SDK's way to ask
    # for them untouched): building its typed models of them, or even walking them as
    # `dict[str, Any]`, cost more CPU per streamed chunk than the rest of its path.

    async def complete(self, request: Request) -> Response:
        try:
            reply = cast(
                dict[str, Any],
                await self._client.post(
                    "/chat/completions", cast_to=object, body=self._params(request)
                ),
            )
        except openai.APIError as exc:
            raise self._translate(exc) from exc
        if not reply.get("choices"):
            raise ProviderError(self.name, "the reply had no choices")
        choice = reply["choices"][0]
        message = choice.get("message") or {}
        acc = _Accumulator(
            text=message.get("content") or "", finish=choice.get("finish_reason") or ""
        )
        for index, call in enumerate(message.get("tool_calls") or []):
            if call.get("function"):
                acc.add_delta({**call, "index": index})
        acc.usage = _usage(reply.get("usage"))
        return acc.response()

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        params = self._params(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        acc = _Accumulator()
        try:
            stream = cast(
                "openai.AsyncStream[dict[str, Any]]",
                await self._client.post(
                    "/chat/completions",
                    cast_to=object,
                    body=params,
                    stream=True,
                    stream_cls=openai.AsyncStream[object],
                ),
            )
            try:
                async for chunk in stream:
                    if chunk.get("usage"):
                        acc.usage = _usage(chunk["usage"])
                    for choice in (chunk.get("choices") or [])[:1]:
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            acc.text += delta["content"]
                            yield StreamEvent.text_delta(delta["content"])
                        for d in delta.get("tool_calls") or []:
                            acc.add_delta(d)
                        if choice.get("finish_reason"):
                            acc.finish = choice["finish_reason"]
            finally:
                await stream.close()
        except openai.APIError as exc:
            raise self._translate(exc) from exc
        yield StreamEvent.final(acc.response())

    async def check(self) -> None:
        """Prove the endpoint answers and the key is accepted (lists the models)."""
        try:
            await self._client.models.list()
        except openai.APIError as exc:
            raise self._translate(exc) from exc

    async def aclose(self) -> None:
        await self._client.close()

    def _params(self, request: Request) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        media = request.media if self.vision else {}
        for m in request.messages:
            messages.extend(_messages(m, media))
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        # OpenAI itself wants max_completion_tokens; compatible servers still read max_tokens.
        limit_key = "max_completion_tokens" if self.name == "openai" else "max_tokens"
        params[limit_key] = self.max_tokens
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        return params

    def _translate(self, exc: Exception) -> ProviderError:
        if isinstance(exc, openai.APIStatusError):
            env = _ENV.get(self.name)
            return status_error(
                self.name,
                exc.status_code,
                error_message(exc.body, exc.message),
                model=self.model,
                key_hint=f"check {self.name}.api_key" + (f" or {env}" if env else ""),
                section=self.name,
                retry_after=exc.response.headers.get("retry-after"),
            )
        if isinstance(exc, openai.APIConnectionError):
            timeout = isinstance(exc, openai.APITimeoutError) and not _refused(exc)
            return connection_error(self.name, self.base_url, section=self.name, timeout=timeout)
        return ProviderError(self.name, str(exc))


def _http_client(timeout: float) -> Any:
    """The SDK's own aiohttp-backed client where aiohttp is installed (the chat transports
    use it already): a sixth less CPU per request than its default httpx pool, which looks
    at every pooled connection on each request. Else None, the SDK's default."""
    try:
        return openai.DefaultAioHttpClient(timeout=timeout)
    except (AttributeError, RuntimeError):  # an SDK without it, or no aiohttp
        return None


def _refused(exc: BaseException) -> bool:
    """Whether the connection itself failed (refused, no route, no such host): the SDK's
    aiohttp client reports that as a connect timeout, its cause tells them apart."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and not isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__
    return False


def _messages(message: Message, media: dict[str, bytes]) -> list[dict[str, Any]]:
    # One pass over the blocks: this runs for every message of the history at every request.
    texts: list[str] = []
    uses: list[ToolUse] = []
    results: list[ToolResult] = []
    attached = False
    for c in message.content:
        if c.kind is ContentKind.TEXT:
            texts.append(c.text)
        elif c.tool_use is not None:
            uses.append(c.tool_use)
        elif c.tool_result is not None:
            results.append(c.tool_result)
        elif c.attachment is not None:
            attached = True
    text = "".join(texts)
    if message.role is Role.ASSISTANT:
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if uses:
            out["tool_calls"] = [
                {
                    "id": u.id,
                    "type": "function",
                    "function": {"name": u.name, "arguments": json.dumps(u.input)},
                }
                for u in uses
            ]
        elif out["content"] is None:
            out["content"] = ""
        return [out]
    # Tool results go first: they must directly follow the assistant's tool calls.
    result: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": r.tool_use_id,
            "content": f"Error: {r.content}" if r.is_error else r.content,
        }
        for r in results
    ]
    if attached:
        result.append({"role": "user", "content": _parts(message, media)})
    elif text or not result:
        result.append({"role": "user", "content": text})
    return result


def _parts(message: Message, media: dict[str, bytes]) -> list[dict[str, Any]]:
    """A user message with files: its text, then each image as a data URL where the bytes
    are at hand (a model without vision is given none), else the file's stand-in text."""
    texts = [message.text] if message.text else []
    images: list[dict[str, Any]] = []
    for attachment in message.attachments:
        data = media.get(attachment.sha256)
        if data is None or not attachment.is_image:
            texts.append(attachment.stand_in())
            continue
        url = f"data:{attachment.media_type};base64,{base64.b64encode(data).decode('ascii')}"
        images.append({"type": "image_url", "image_url": {"url": url}})
    return [{"type": "text", "text": "\n".join(texts)}, *images] if texts else images


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class _Accumulator:
    """Builds one Response from a whole reply or from stream deltas."""

    text: str = ""
    finish: str = ""
    calls: list[_Call] = field(default_factory=list)
    by_index: dict[int | None, _Call] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)

    def add_delta(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        call = self.by_index.get(index)
        if call is None:
            call = self.by_index[index] = _Call()
            self.calls.append(call)
        if delta.get("id"):
            call.id = delta["id"]
        fn = delta.get("function") or {}
        if fn.get("name"):
            call.name += fn["name"]
        if fn.get("arguments"):
            call.arguments += fn["arguments"]

    def response(self) -> Response:
        content = [Content.of_text(self.text)] if self.text else []
        for i, call in enumerate(self.calls):
            content.append(
                Content.of_tool_use(
                    ToolUse(id=call.id or f"call_{i}", name=call.name, input=_arguments(call))
                )
            )
        if self.calls and self.finish != "length":
            stop = StopReason.TOOL_USE  # some servers say "stop" even when they called tools
        else:
            stop = {"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS}.get(
                self.finish, StopReason.OTHER if self.finish else StopReason.END_TURN
            )
        return Response(
            message=Message(role=Role.ASSISTANT, content=content),
            stop_reason=stop,
            usage=self.usage,
        )


def _arguments(call: _Call) -> dict[str, Any]:
    """Decoded arguments; broken JSON is kept under a key the schema check will reject."""
    if not call.arguments.strip():
        return {}
    try:
        value = json.loads(call.arguments)
    except json.JSONDecodeError:
        return {"invalid_json_arguments": call.arguments}
    return value if isinstance(value, dict) else {"invalid_json_arguments": call.arguments}


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    # Usage counts input as Anthropic does: what the cache supplied is not counted again
    # (OpenAI's prompt_tokens includes it), so each token is priced once.
    return Usage(
        input_tokens=max(0, (usage.get("prompt_tokens") or 0) - cached),
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=cached,
    )
