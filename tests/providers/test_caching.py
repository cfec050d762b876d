"""Where cache breakpoints go: system, the compressor's prefix, the previous turn, the newest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rousseau.agent import Content, Message, Request, Role, ToolDefinition, ToolResult, ToolUse
from rousseau.providers.anthropic import MAX_CACHE_BREAKPOINTS, AnthropicProvider, cache_breakpoints

pytestmark = pytest.mark.anyio
MARK = {"type": "ephemeral"}
TOOL = ToolDefinition(name="read", description="d", input_schema={"type": "object"})


@pytest.fixture
async def provider() -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider(api_key="k", model="m", base_url="http://127.0.0.1:9")
    yield p
    await p.aclose()


def marked(params: dict[str, Any]) -> list[int]:
    return [
        i
        for i, m in enumerate(params["messages"])
        if any("cache_control" in block for block in m["content"])
    ]


def exchange(n: int) -> list[Message]:
    """n finished turns of user text and assistant text."""
    out: list[Message] = []
    for i in range(n):
        out += [Message.user(f"q{i}"), Message.assistant(f"a{i}")]
    return out


def tool_round() -> list[Message]:
    return [
        Message(role=Role.ASSISTANT, content=[Content.of_tool_use(ToolUse(id="t", name="read"))]),
        Message(
            role=Role.USER,
            content=[Content.of_tool_result(ToolResult(tool_use_id="t", content="x"))],
        ),
    ]


async def test_first_message_of_a_session(provider: AnthropicProvider) -> None:
    params = provider.params(
        Request(session_id="s", system="sys", messages=[Message.user("hi")], tools=[TOOL])
    )
    assert params["system"] == [{"type": "text", "text": "sys", "cache_control": MARK}]
    assert "cache_control" not in params["tools"][0]  # covered by the system mark
    assert marked(params) == [0]


async def test_long_session_caches_previous_turn_and_newest(provider: AnthropicProvider) -> None:
    messages = [*exchange(5), Message.user("new question"), *tool_round()]
    params = provider.params(Request(session_id="s", system="sys", messages=messages))
    # Previous turn ended at index 9 (a4); the newest message is the tool result at 12.
    assert marked(params) == [9, 12]


async def test_compressed_prefix_is_marked(provider: AnthropicProvider) -> None:
    messages = [Message.user("[summary]"), *exchange(3), Message.user("go on")]
    params = provider.params(
        Request(session_id="s", system="sys", messages=messages, cacheable_messages=1)
    )
    assert marked(params) == [0, 6, 7]
    total = len(marked(params)) + 1  # plus the system prompt
    assert total <= MAX_CACHE_BREAKPOINTS


async def test_without_system_the_tools_carry_the_mark(provider: AnthropicProvider) -> None:
    params = provider.params(
        Request(session_id="s", system="", messages=[Message.user("hi")], tools=[TOOL])
    )
    assert params["tools"][-1]["cache_control"] == MARK and "system" not in params


async def test_caching_can_be_turned_off() -> None:
    p = AnthropicProvider(
        api_key="k", model="m", base_url="http://127.0.0.1:9", prompt_caching=False
    )
    params = p.params(Request(session_id="s", system="sys", messages=exchange(3)))
    assert marked(params) == [] and "cache_control" not in params["system"][0]
    await p.aclose()


def test_breakpoints_never_exceed_the_limit() -> None:
    for n in range(0, 8):
        for cacheable in (0, 1, 3):
            messages = [*exchange(n), Message.user("q")]
            points = cache_breakpoints(
                Request(session_id="s", system="", messages=messages, cacheable_messages=cacheable)
            )
            assert len(points) <= MAX_CACHE_BREAKPOINTS - 1
            assert all(0 <= p < len(messages) for p in points)
