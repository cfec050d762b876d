"""The turn algorithm, step by step, with the scripted provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from rousseau.agent import (
    Agent,
    AllowAllApprover,
    ApprovalRequest,
    Decision,
    DenyAllApprover,
    EmptySessionError,
    MaxIterationsError,
    Message,
    Options,
    Request,
    Session,
    StopReason,
    StreamEventKind,
    ToolCall,
    ToolOutput,
    Usage,
)
from rousseau.agent.testing import (
    FunctionProvider,
    ScriptedProvider,
    text_reply,
    tool_reply,
    tools_reply,
)
from rousseau.media import BlobStore
from rousseau.state import Store
from rousseau.tools import Registry, Tool

pytestmark = pytest.mark.anyio

T, C, R, F = (
    StreamEventKind.TEXT,
    StreamEventKind.TOOL_CALL,
    StreamEventKind.TOOL_RESULT,
    StreamEventKind.RESPONSE,
)
"""Event kinds, short, for the sequences the stream tests expect."""


class Echo(Tool):
    name = "echo"
    description = "Echo the text back."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        self.calls.append(input)
        return ToolOutput(content=f"echo: {input['text']}")


class Boom(Tool):
    name = "boom"
    description = "Always fails."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        raise RuntimeError("kaboom")


class Slow(Tool):
    name = "slow"
    description = "Sleeps."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.started = anyio.Event()

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        self.started.set()
        await anyio.sleep(30)
        return ToolOutput(content="finished")


def session(text: str = "hi") -> Session:
    return Session(id="s1", messages=[Message.user(text)])


async def test_plain_answer_ends_turn() -> None:
    provider = ScriptedProvider("Hello there.")
    s = session()
    response = await Agent(provider).turn(s)
    assert response.message.text == "Hello there."
    assert response.stop_reason is StopReason.END_TURN
    assert [m.role.value for m in s.messages] == ["user", "assistant"]
    assert len(provider.requests) == 1


async def test_tool_round_trip() -> None:
    echo = Echo()
    provider = ScriptedProvider(tool_reply("echo", text="ping"), "It said ping.")
    s = session()
    agent = Agent(provider, Registry([echo]), Options(approver=AllowAllApprover()))
    response = await agent.turn(s)
    assert response.message.text == "It said ping."
    assert echo.calls == [{"text": "ping"}]
    # user, assistant(tool_use), user(tool_result), assistant(text)
    assert [m.role.value for m in s.messages] == ["user", "assistant", "user", "assistant"]
    result = s.messages[2].tool_results[0]
    assert result.content == "echo: ping" and not result.is_error
    assert result.tool_use_id == s.messages[1].tool_uses[0].id
    # The second request carried the result back and the tool definitions every time.
    assert provider.requests[1].messages[-1].tool_results[0].content == "echo: ping"
    assert [t.name for t in provider.requests[0].tools] == ["echo"]
    assert provider.requests[0].tools[0].input_schema["required"] == ["text"]


class Shot(Tool):
    name = "shot"
    description = "Gives a picture."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        picture = await self.blobs.put(b"\x89PNG picture", media_type="image/png", name="s.png")
        return ToolOutput(content="a screenshot", attachments=(picture,))


async def test_a_file_a_tool_gives_follows_its_result_with_its_bytes(tmp_path: Path) -> None:
    blobs = BlobStore(folder=tmp_path)
    provider = ScriptedProvider(tool_reply("shot"), "I see it.")
    s = session()
    agent = Agent(
        provider, Registry([Shot(blobs)]), Options(approver=AllowAllApprover(), media=blobs)
    )
    await agent.turn(s)
    sent = provider.requests[1]
    results = sent.messages[-1]
    assert [c.kind.value for c in results.content] == ["tool_result", "image"]
    [picture] = results.attachments
    assert picture.media_type == "image/png" and sent.media[picture.sha256] == b"\x89PNG picture"


async def test_several_calls_give_one_results_message_in_order() -> None:
    echo = Echo()
    provider = ScriptedProvider(
        tools_reply([("echo", {"text": "a"}), ("echo", {"text": "b"})]), "done"
    )
    s = session()
    await Agent(provider, Registry([echo]), Options(approver=AllowAllApprover())).turn(s)
    results = s.messages[2].tool_results
    assert [r.content for r in results] == ["echo: a", "echo: b"]
    assert [r.tool_use_id for r in results] == [u.id for u in s.messages[1].tool_uses]


async def test_denied_call_becomes_error_result_with_reason() -> None:
    echo = Echo()
    provider = ScriptedProvider(tool_reply("echo", text="x"), "ok")
    s = session()
    agent = Agent(provider, Registry([echo]), Options(approver=DenyAllApprover("not today")))
    events = [e async for e in agent.turn_stream(s)]
    assert echo.calls == []
    result = s.messages[2].tool_results[0]
    assert result.is_error and "not today" in result.content
    denied = [e for e in events if e.kind is StreamEventKind.TOOL_RESULT]
    assert denied[0].denied is True


async def test_default_approver_allows_read_and_grep_only() -> None:
    echo = Echo()
    provider = ScriptedProvider(tool_reply("echo", text="x"), "ok")
    s = session()
    await Agent(provider, Registry([echo])).turn(s)
    assert echo.calls == []
    assert "not allowed" in s.messages[2].tool_results[0].content


async def test_tool_exception_becomes_error_result() -> None:
    provider = ScriptedProvider(tool_reply("boom"), "sorry")
    s = session()
    agent = Agent(provider, Registry([Boom()]), Options(approver=AllowAllApprover()))
    response = await agent.turn(s)
    assert response.message.text == "sorry"
    result = s.messages[2].tool_results[0]
    assert result.is_error and "kaboom" in result.content


async def test_unknown_tool_is_reported_to_the_model() -> None:
    provider = ScriptedProvider(tool_reply("nope"), "my mistake")
    s = session()
    response = await Agent(provider, Registry([Echo()])).turn(s)
    assert response.message.text == "my mistake"
    result = s.messages[2].tool_results[0]
    assert result.is_error and result.content == "agent: tool not found: nope"


async def test_invalid_input_is_refused_before_the_approver() -> None:
    echo = Echo()
    asked: list[ApprovalRequest] = []

    class Recording:
        async def approve(self, request: ApprovalRequest) -> Decision:
            asked.append(request)
            return Decision.allowed()

    provider = ScriptedProvider(tool_reply("echo", txt="typo"), "ok")
    s = session()
    await Agent(provider, Registry([echo]), Options(approver=Recording())).turn(s)
    result = s.messages[2].tool_results[0]
    assert result.is_error
    assert "'text' is a required property" in result.content
    assert asked == [] and echo.calls == []


async def test_max_iterations() -> None:
    echo = Echo()
    provider = ScriptedProvider(*[tool_reply("echo", text=str(i)) for i in range(3)])
    agent = Agent(
        provider, Registry([echo]), Options(approver=AllowAllApprover(), max_iterations=3)
    )
    s = session()
    with pytest.raises(MaxIterationsError, match="agent: max iterations exceeded"):
        await agent.turn(s)
    assert len(echo.calls) == 3
    # Every call was answered, so the session can continue.
    assert s.messages[-1].tool_results


async def test_zero_max_iterations_means_default() -> None:
    provider = ScriptedProvider(*[tool_reply("echo", text="x") for _ in range(40)])
    agent = Agent(
        provider, Registry([Echo()]), Options(approver=AllowAllApprover(), max_iterations=0)
    )
    with pytest.raises(MaxIterationsError):
        await agent.turn(session())
    assert len(provider.requests) == 32


async def test_empty_session() -> None:
    with pytest.raises(EmptySessionError, match="agent: empty session"):
        await Agent(ScriptedProvider("x")).turn(Session(id="empty"))


async def test_cancel_during_model_call_keeps_last_complete_message() -> None:
    provider = ScriptedProvider("late", delay=30)
    s = session()
    with anyio.move_on_after(0.1):
        await Agent(provider).turn(s)
    assert [m.role.value for m in s.messages] == ["user"]


async def test_cancel_during_tool_closes_the_call() -> None:
    slow = Slow()
    provider = ScriptedProvider(tools_reply([("slow", {}), ("slow", {})]), "never")
    s = session()
    agent = Agent(provider, Registry([slow]), Options(approver=AllowAllApprover()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.turn, s)
        await slow.started.wait()
        tg.cancel_scope.cancel()
    assert [m.role.value for m in s.messages] == ["user", "assistant", "user"]
    results = s.messages[2].tool_results
    assert len(results) == 2
    assert all(r.is_error and r.content == "cancelled" for r in results)
    assert provider.remaining == 1


async def test_system_prompt_is_recomposed_every_iteration() -> None:
    calls = {"n": 0}

    class Skills:
        async def appendix(self, s: Session) -> str:
            calls["n"] += 1
            return f"skill pass {calls['n']}"

    class Recall:
        async def appendix(self, s: Session) -> str:
            return ""  # empty parts are omitted

    provider = ScriptedProvider(tool_reply("echo", text="x"), "done")
    options = Options(
        system_prompt="Be brief.",
        skills=Skills(),
        recall=Recall(),
        approver=AllowAllApprover(),
    )
    await Agent(provider, Registry([Echo()]), options).turn(session())
    assert [r.system for r in provider.requests] == [
        "Be brief.\n\nskill pass 1",
        "Be brief.\n\nskill pass 2",
    ]


async def test_turn_stream_yields_deltas_then_tools_then_responses() -> None:
    provider = ScriptedProvider(
        tools_reply([("echo", {"text": "hi"})], text="Let me check."), "All good here.", chunk=4
    )
    agent = Agent(provider, Registry([Echo()]), Options(approver=AllowAllApprover()))
    kinds = []
    text = ""
    async for event in agent.turn_stream(session()):
        kinds.append(event.kind)
        if event.kind is StreamEventKind.TEXT:
            text += event.text
    assert text == "Let me check.All good here."
    # 13 + 14 characters in 4-character deltas: 4 deltas per iteration.
    assert kinds == [T, T, T, T, F, C, R, T, T, T, T, F]


async def test_turn_shows_each_event_of_its_stream_and_returns_the_response() -> None:
    provider = ScriptedProvider(
        tools_reply([("echo", {"text": "hi"})], text="Let me check."), "All good here.", chunk=4
    )
    agent = Agent(provider, Registry([Echo()]), Options(approver=AllowAllApprover()))
    seen: list[StreamEventKind] = []
    response = await agent.turn(session(), on_event=lambda e: seen.append(e.kind))
    assert seen == [T, T, T, T, F, C, R, T, T, T, T, F]
    assert response.message.text == "All good here."


async def test_non_streaming_provider_and_usage_summed() -> None:
    replies = iter(
        [
            tool_reply("echo", text="x"),
            text_reply("fine", usage=Usage(input_tokens=7, output_tokens=3)),
        ]
    )

    def answer(request: Request) -> Any:
        return next(replies)

    provider = FunctionProvider(answer)
    agent = Agent(provider, Registry([Echo()]), Options(approver=AllowAllApprover()))
    response = await agent.turn(session())
    assert response.message.text == "fine"
    assert response.usage.input_tokens == 7 and response.usage.output_tokens == 3
    assert len(provider.requests) == 2


async def test_cut_off_tool_call_is_closed_not_run() -> None:
    echo = Echo()
    cut = tool_reply("echo", text="x")
    cut.stop_reason = StopReason.MAX_TOKENS
    s = session()
    agent = Agent(ScriptedProvider(cut), Registry([echo]), Options(approver=AllowAllApprover()))
    response = await agent.turn(s)
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert echo.calls == []
    assert s.messages[-1].tool_results[0].is_error


async def test_provider_error_propagates_and_keeps_user_message() -> None:
    s = session()
    with pytest.raises(RuntimeError, match="upstream"):
        await Agent(ScriptedProvider(RuntimeError("upstream"))).turn(s)
    assert [m.role.value for m in s.messages] == ["user"]


async def test_every_message_is_persisted_in_order() -> None:
    store = Store(":memory:")
    s = await store.create_session("p1")
    agent = Agent(
        ScriptedProvider(tool_reply("echo", text="x"), "done"),
        Registry([Echo()]),
        Options(approver=AllowAllApprover(), history=store),
    )
    await agent.reply(s, "hello")
    loaded = await store.load("p1")
    assert loaded is not None
    assert [m.role.value for m in loaded.messages] == ["user", "assistant", "user", "assistant"]
    assert loaded.messages[2].tool_results[0].content == "echo: x"
    assert loaded.messages[3].text == "done"
    store.close()


async def test_approver_failure_denies() -> None:
    class Broken:
        async def approve(self, request: ApprovalRequest) -> Decision:
            raise RuntimeError("approver down")

    echo = Echo()
    s = session()
    agent = Agent(
        ScriptedProvider(tool_reply("echo", text="x"), "ok"),
        Registry([echo]),
        Options(approver=Broken()),
    )
    await agent.turn(s)
    assert echo.calls == []
    assert "approver failed" in s.messages[2].tool_results[0].content


async def test_stopping_a_stream_early_closes_the_provider_stream_at_once() -> None:
    from collections.abc import AsyncGenerator
    from contextlib import aclosing

    from rousseau.agent import StreamEvent

    closed: list[bool] = []

    class Streaming:
        name = "streaming"

        async def complete(self, request: Request) -> Any:
            raise AssertionError("streams only")

        async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
            try:
                yield StreamEvent.text_delta("first")
                await anyio.sleep(30)
                yield StreamEvent.text_delta("never")
            finally:
                closed.append(True)

    async with aclosing(Agent(Streaming()).turn_stream(session())) as events:
        async for event in events:
            assert event.text == "first"
            break
    assert closed == [True]
