"""The OpenAI-compatible provider, real SDK against a fake chat-completions API on 127.0.0.1."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rousseau.agent import (
    Agent,
    AllowAllApprover,
    Message,
    Options,
    ProviderError,
    Request,
    Session,
    StopReason,
    StreamEventKind,
    ToolDefinition,
)
from rousseau.providers.openai import OpenAIProvider
from rousseau.tools import builtin_registry
from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    Sleep,
    openai_completion,
    openai_error,
    openai_stream,
)
from tests.helpers import free_port
from tests.providers.clients import close_clients, track  # noqa: F401 - fixture

pytestmark = pytest.mark.anyio

TOOL = ToolDefinition(
    name="bash",
    description="Run a command",
    input_schema={
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
        "required": ["command"],
    },
)


def provider(server: FakeLLMServer, name: str = "openai", max_retries: int = 2) -> OpenAIProvider:
    p = OpenAIProvider(
        name=name,
        api_key="sk-test",
        model="gpt-test",
        base_url=server.url + "/v1",
        max_retries=max_retries,
    )
    track(p)
    return p


def request() -> Request:
    return Request(session_id="s", system="Be brief.", messages=[Message.user("hi")], tools=[TOOL])


async def test_plain_text(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(openai_completion("Hello!", prompt_tokens=9, cached_tokens=4)))
    response = await provider(fake_llm).complete(request())
    assert response.message.text == "Hello!"
    assert response.stop_reason is StopReason.END_TURN
    # input as Anthropic counts it: the 4 read from the cache are not counted twice
    assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (5, 4)
    sent = fake_llm.posts()[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert sent.body["max_completion_tokens"] == 4096
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": TOOL.input_schema,
            },
        }
    ]


async def test_compatible_servers_get_max_tokens(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(openai_completion("ok")))
    await provider(fake_llm, name="ollama").complete(request())
    body = fake_llm.posts()[0].body
    assert body["max_tokens"] == 4096 and "max_completion_tokens" not in body


async def test_streamed_text_with_usage(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(openai_stream(openai_completion("Streaming works fine.", completion_tokens=6)))
    events = [e async for e in provider(fake_llm).stream(request())]
    deltas = [e.text for e in events if e.kind is StreamEventKind.TEXT]
    assert len(deltas) > 1 and "".join(deltas) == "Streaming works fine."
    final = events[-1].response
    assert final is not None and final.message.text == "Streaming works fine."
    assert final.usage.output_tokens == 6
    body = fake_llm.posts()[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_tool_calls_plain_and_streamed(fake_llm: FakeLLMServer) -> None:
    completion = openai_completion(
        None, [("bash", {"command": "ls -la"}), ("bash", {"command": "pwd", "timeout": 5})]
    )
    fake_llm.push(JSONReply(completion), openai_stream(completion, chunk=3))
    p = provider(fake_llm)
    plain = await p.complete(request())
    streamed = [e async for e in p.stream(request())][-1].response
    assert streamed is not None
    for response in (plain, streamed):
        assert response.stop_reason is StopReason.TOOL_USE
        uses = response.message.tool_uses
        assert [(u.name, u.input) for u in uses] == [
            ("bash", {"command": "ls -la"}),
            ("bash", {"command": "pwd", "timeout": 5}),
        ]
        assert [u.id for u in uses] == [
            c["id"] for c in completion["choices"][0]["message"]["tool_calls"]
        ]


async def test_tool_calls_with_stop_finish_reason_still_run(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(
        JSONReply(openai_completion(None, [("bash", {"command": "ls"})], finish_reason="stop"))
    )
    response = await provider(fake_llm, name="ollama").complete(request())
    assert response.stop_reason is StopReason.TOOL_USE


async def test_broken_tool_arguments_become_a_readable_error(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    completion = openai_completion(None, [("bash", {"command": "ls"})])
    completion["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"command": '
    fake_llm.push(openai_stream(completion), openai_stream(openai_completion("sorry")))
    agent = Agent(
        provider(fake_llm), builtin_registry(tmp_path), Options(approver=AllowAllApprover())
    )
    s = Session(id="s", messages=[Message.user("go")])
    await agent.turn(s)
    result = s.messages[2].tool_results[0]
    assert result.is_error and "invalid_json_arguments" in result.content


async def test_full_tool_round_trip_wire_format(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    completion = openai_completion(None, [("bash", {"command": "echo hi"})])
    call_id = completion["choices"][0]["message"]["tool_calls"][0]["id"]
    fake_llm.push(openai_stream(completion), openai_stream(openai_completion("It printed hi.")))
    agent = Agent(
        provider(fake_llm), builtin_registry(tmp_path), Options(approver=AllowAllApprover())
    )
    s = Session(id="s", messages=[Message.user("say hi")])
    response = await agent.turn(s)
    assert response.message.text == "It printed hi."
    second = fake_llm.posts()[1].body["messages"]
    assert second[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": "echo hi"})},
            }
        ],
    }
    assert second[2] == {"role": "tool", "tool_call_id": call_id, "content": "hi"}


async def test_server_error_then_success_is_retried(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(openai_error(500, "boom"), JSONReply(openai_completion("recovered")))
    response = await provider(fake_llm).complete(request())
    assert response.message.text == "recovered"
    assert len(fake_llm.posts()) == 2


async def test_unauthorized_fails_fast_with_a_clear_line(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(openai_error(401, "Incorrect API key provided"))
    with pytest.raises(ProviderError) as err:
        [e async for e in provider(fake_llm).stream(request())]
    assert str(err.value) == (
        "openai: HTTP 401: Incorrect API key provided (check openai.api_key or OPENAI_API_KEY)"
    )
    assert err.value.status == 401
    assert len(fake_llm.posts()) == 1


async def test_connection_refused_is_one_line() -> None:
    port = free_port()
    p = OpenAIProvider(
        name="openrouter",
        api_key="k",
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_retries=0,
    )
    track(p)
    with pytest.raises(ProviderError) as err:
        await p.complete(request())
    assert str(err.value) == (
        f"openrouter: cannot connect to http://127.0.0.1:{port}/v1 "
        "(check openrouter.base_url and the network)"
    )


async def test_check_lists_models(fake_llm: FakeLLMServer) -> None:
    await provider(fake_llm).check()
    assert fake_llm.requests[0].path == "/v1/models"


async def test_timeout_is_honoured(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Sleep(3, JSONReply(openai_completion("late"))))
    p = OpenAIProvider(
        api_key="k", model="m", base_url=fake_llm.url + "/v1", max_retries=0, timeout=0.5
    )
    track(p)
    with pytest.raises(ProviderError, match=r"^openai: timed out talking to http://127\.0\.0\.1"):
        await p.complete(request())


async def test_rate_limit_with_retry_after_then_success(fake_llm: FakeLLMServer) -> None:
    limited = openai_error(429, "Rate limit reached")
    limited.headers["retry-after"] = "1"
    fake_llm.push(limited, JSONReply(openai_completion("after the wait")))
    started = time.monotonic()
    response = await provider(fake_llm).complete(request())
    assert response.message.text == "after the wait"
    assert len(fake_llm.posts()) == 2
    assert time.monotonic() - started >= 0.9, "Retry-After was not honoured"
