"""The Anthropic provider, real SDK against a fake Messages API on 127.0.0.1."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rousseau.agent import (
    Agent,
    AllowAllApprover,
    Message,
    Options,
    ProviderError,
    ProviderRateLimitError,
    Request,
    Session,
    StopReason,
    StreamEventKind,
    ToolDefinition,
)
from rousseau.providers.anthropic import AnthropicProvider
from rousseau.tools import builtin_registry
from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    Sleep,
    a_text,
    a_tool,
    anthropic_error,
    anthropic_message,
    anthropic_stream,
)
from tests.helpers import free_port
from tests.providers.clients import close_clients, track  # noqa: F401 - fixture

pytestmark = pytest.mark.anyio

TOOL = ToolDefinition(
    name="read",
    description="Read a file",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
)


def provider(server: FakeLLMServer, max_retries: int = 2) -> AnthropicProvider:
    p = AnthropicProvider(
        api_key="sk-ant-test", model="claude-test", base_url=server.url, max_retries=max_retries
    )
    track(p)
    return p


def request(*messages: Message) -> Request:
    return Request(
        session_id="s",
        system="Be brief.",
        messages=list(messages) or [Message.user("hi")],
        tools=[TOOL],
    )


async def test_plain_text(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(anthropic_message(a_text("Hello!"), input_tokens=12, output_tokens=3)))
    response = await provider(fake_llm).complete(request())
    assert response.message.text == "Hello!"
    assert response.stop_reason is StopReason.END_TURN
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    sent = fake_llm.posts()[0]
    assert sent.path == "/v1/messages"
    auth = sent.headers.get("x-api-key") or sent.headers.get("authorization", "")
    assert auth.removeprefix("Bearer ") == "sk-ant-test"
    assert sent.body["model"] == "claude-test"
    assert sent.body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert sent.body["tools"] == [
        {
            "name": "read",
            "description": "Read a file",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }
    ]


async def test_streamed_text(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(anthropic_stream(anthropic_message(a_text("Streaming works fine."))))
    events = [e async for e in provider(fake_llm).stream(request())]
    deltas = [e.text for e in events if e.kind is StreamEventKind.TEXT]
    assert len(deltas) > 1 and "".join(deltas) == "Streaming works fine."
    assert events[-1].kind is StreamEventKind.RESPONSE
    assert events[-1].response is not None
    assert events[-1].response.message.text == "Streaming works fine."
    assert fake_llm.posts()[0].body["stream"] is True


async def test_tool_call_plain_and_streamed(fake_llm: FakeLLMServer) -> None:
    message = anthropic_message(
        a_text("Let me look."),
        a_tool("read", {"path": "notes/today.md"}, id="toolu_1"),
        stop_reason="tool_use",
        cache_read=4,
        cache_write=2,
    )
    fake_llm.push(JSONReply(message), anthropic_stream(message))
    p = provider(fake_llm)
    plain = await p.complete(request())
    streamed = [e async for e in p.stream(request())][-1].response
    assert streamed is not None
    for response in (plain, streamed):
        assert response.stop_reason is StopReason.TOOL_USE
        [use] = response.message.tool_uses
        assert (use.id, use.name, use.input) == ("toolu_1", "read", {"path": "notes/today.md"})
        assert response.message.text == "Let me look."
    assert (plain.usage.cache_read_tokens, plain.usage.cache_write_tokens) == (4, 2)


async def test_full_tool_round_trip_wire_format(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("apple\n")
    fake_llm.push(
        anthropic_stream(
            anthropic_message(
                a_tool("read", {"path": "a.txt"}, id="toolu_9"), stop_reason="tool_use"
            )
        ),
        anthropic_stream(anthropic_message(a_text("It says apple."))),
    )
    agent = Agent(
        provider(fake_llm), builtin_registry(tmp_path), Options(approver=AllowAllApprover())
    )
    s = Session(id="s", messages=[Message.user("what is in a.txt?")])
    response = await agent.turn(s)
    assert response.message.text == "It says apple."
    second = fake_llm.posts()[1].body["messages"]
    assert second[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a.txt"}}
        ],
    }
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_9",
                "content": "     1\tapple\n",
                "is_error": False,
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }


async def test_server_error_then_success_is_retried(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(
        anthropic_error(500, "internal"),
        JSONReply(anthropic_message(a_text("recovered"))),
    )
    response = await provider(fake_llm, max_retries=2).complete(request())
    assert response.message.text == "recovered"
    assert len(fake_llm.posts()) == 2


async def test_unauthorized_fails_fast_with_a_clear_line(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(anthropic_error(401, "invalid x-api-key", "authentication_error"))
    with pytest.raises(ProviderError) as err:
        await provider(fake_llm, max_retries=2).complete(request())
    assert err.value.status == 401
    text = str(err.value)
    assert text == (
        "anthropic: HTTP 401: invalid x-api-key (check anthropic.api_key or ANTHROPIC_API_KEY)"
    )
    assert len(fake_llm.posts()) == 1


async def test_streamed_error_is_translated(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(anthropic_error(404, "model: claude-test not found", "not_found_error"))
    with pytest.raises(ProviderError, match=r"HTTP 404.*check anthropic.model \(claude-test\)"):
        [e async for e in provider(fake_llm).stream(request())]


async def test_connection_refused_is_one_line() -> None:
    port = free_port()
    p = AnthropicProvider(
        api_key="k", model="m", base_url=f"http://127.0.0.1:{port}", max_retries=0
    )
    track(p)
    with pytest.raises(ProviderError) as err:
        await p.complete(request())
    assert str(err.value) == (
        f"anthropic: cannot connect to http://127.0.0.1:{port} "
        "(check anthropic.base_url and the network)"
    )


async def test_check_lists_models(fake_llm: FakeLLMServer) -> None:
    await provider(fake_llm).check()
    assert fake_llm.requests[0].path.startswith("/v1/models")


async def test_timeout_is_honoured(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Sleep(3, JSONReply(anthropic_message(a_text("late")))))
    p = AnthropicProvider(api_key="k", model="m", base_url=fake_llm.url, max_retries=0, timeout=0.5)
    track(p)
    with pytest.raises(
        ProviderError, match=r"^anthropic: timed out talking to http://127\.0\.0\.1"
    ):
        await p.complete(request())


async def test_rate_limit_with_retry_after_then_success(fake_llm: FakeLLMServer) -> None:
    limited = anthropic_error(429, "rate limited", "rate_limit_error")
    limited.headers["retry-after"] = "1"
    fake_llm.push(limited, JSONReply(anthropic_message(a_text("after the wait"))))
    started = time.monotonic()
    response = await provider(fake_llm).complete(request())
    assert response.message.text == "after the wait"
    assert len(fake_llm.posts()) == 2
    assert time.monotonic() - started >= 0.9, "Retry-After was not honoured"


async def test_rate_limit_beyond_retries_is_a_rate_limit_error(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[anthropic_error(429, "rate limited", "rate_limit_error") for _ in range(2)])
    with pytest.raises(ProviderRateLimitError) as err:
        await provider(fake_llm, max_retries=1).complete(request())
    assert err.value.status == 429 and "wait and try again" in str(err.value)
    assert len(fake_llm.posts()) == 2
