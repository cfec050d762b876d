"""Test fakes shipped for users' own tests: providers that answer from a script or a function.

provider = ScriptedProvider(tool_reply("read", path="notes.md"), text_reply("Done."))
agent = Agent(provider, registry)
...
assert provider.requests[1].messages[-1].tool_results[0].content == "..."
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from rousseau.agent.types import (
    Content,
    Message,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    ToolUse,
    Usage,
)

_ids = itertools.count(1)

Step = Response | str | BaseException | Callable[[Request], "Response | Awaitable[Response]"]


def text_reply(text: str, *, usage: Usage | None = None) -> Response:
    """A final assistant answer."""
    return Response(
        message=Message.assistant(text), stop_reason=StopReason.END_TURN, usage=usage or Usage()
    )


def tool_reply(name: str, input: dict[str, Any] | None = None, /, **fields: Any) -> Response:
    """An assistant message asking for one tool call: `tool_reply("read", path="a.md")`."""
    return tools_reply([(name, {**(input or {}), **fields})])


def tools_reply(calls: list[tuple[str, dict[str, Any]]], *, text: str = "") -> Response:
    """An assistant message asking for several tool calls at once."""
    content = [Content.of_text(text)] if text else []
    content += [
        Content.of_tool_use(ToolUse(id=f"call_{next(_ids)}", name=name, input=dict(input)))
        for name, input in calls
    ]
    return Response(
        message=Message(role=Role.ASSISTANT, content=content), stop_reason=StopReason.TOOL_USE
    )


class FunctionProvider:
    """A provider whose replies come from `fn(request)`; it records every request unless
    `record=False` (for long runs, where the copies would pile up)."""

    name = "function"

    def __init__(
        self, fn: Callable[[Request], Response | Awaitable[Response]], *, record: bool = True
    ) -> None:
        self.fn = fn
        self.record = record
        self.requests: list[Request] = []

    async def complete(self, request: Request) -> Response:
        if self.record:
            self.requests.append(_snapshot(request))
        result = self.fn(request)
        if inspect.isawaitable(result):
            result = await result
        return result


class ScriptedProvider:
    """A streaming provider that plays a script, one step per request.

    A step is a Response, a plain string (a final answer), an exception to raise, or a
    function of the request. `delay` seconds pass before each reply (to test cancellation
    and concurrency); text is streamed in `chunk`-sized deltas, `pace` seconds apart (a
    model writing slowly).
    """

    name = "scripted"

    def __init__(
        self, *script: Step, delay: float = 0.0, chunk: int = 8, pace: float = 0.0
    ) -> None:
        self.script = list(script)
        self.delay = delay
        self.chunk = max(1, chunk)
        self.pace = pace
        self.requests: list[Request] = []

    @property
    def remaining(self) -> int:
        return len(self.script)

    async def _next(self, request: Request) -> Response:
        self.requests.append(_snapshot(request))
        if self.delay:
            await anyio.sleep(self.delay)
        if not self.script:
            raise RuntimeError(
                f"ScriptedProvider: script exhausted after {len(self.requests) - 1} replies"
            )
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            return text_reply(step)
        if isinstance(step, Response):
            return step
        result = step(request)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def complete(self, request: Request) -> Response:
        return await self._next(request)

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        response = await self._next(request)
        text = response.message.text
        for i in range(0, len(text), self.chunk):
            if i and self.pace:
                await anyio.sleep(self.pace)
            yield StreamEvent.text_delta(text[i : i + self.chunk])
            await anyio.lowlevel.checkpoint()
        yield StreamEvent.final(response)


def _snapshot(request: Request) -> Request:
    """Copy the message list so later appends do not rewrite what the test inspects."""
    return Request(
        session_id=request.session_id,
        system=request.system,
        messages=list(request.messages),
        tools=list(request.tools),
        cacheable_messages=request.cacheable_messages,
        media=dict(request.media),
    )
