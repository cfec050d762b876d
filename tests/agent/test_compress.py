"""LLMCompressor: when it triggers, where it cuts, and what the next request carries."""

from __future__ import annotations

import pytest

from rousseau.agent import (
    Agent,
    Content,
    LLMCompressor,
    Message,
    NoopCompressor,
    Options,
    Role,
    Session,
    ToolResult,
    ToolUse,
)
from rousseau.agent.compress import SUMMARY_HEADER
from rousseau.agent.testing import ScriptedProvider
from rousseau.state import Store

pytestmark = pytest.mark.anyio


def chat(n: int) -> list[Message]:
    return [Message.user(f"u{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(n)]


def called(use: ToolUse) -> list[Message]:
    """A tool call and its result."""
    return [
        Message(role=Role.ASSISTANT, content=[Content.of_tool_use(use)]),
        Message(
            role=Role.USER,
            content=[Content.of_tool_result(ToolResult(tool_use_id=use.id, content="ok"))],
        ),
    ]


async def test_noop_never_compresses() -> None:
    s = Session(id="s", messages=chat(200))
    assert await NoopCompressor().compress(s) is None
    assert len(s.messages) == 200


async def test_defaults_match_the_contract() -> None:
    c = LLMCompressor(ScriptedProvider())
    assert (c.trigger_messages, c.keep_recent) == (60, 8)


async def test_below_trigger_nothing_happens() -> None:
    provider = ScriptedProvider()
    s = Session(id="s", messages=chat(60))
    assert await LLMCompressor(provider).compress(s) is None
    assert provider.requests == []


async def test_compresses_old_messages_with_custom_prompt() -> None:
    provider = ScriptedProvider("They talked about u0..u52.")
    s = Session(id="s", messages=chat(61))
    compaction = await LLMCompressor(provider, prompt="Summarise tersely.").compress(s)
    assert compaction is not None
    # 61 messages, keep 8: the cut lands on the user message at index 52 (61 - 8 = 53 is odd).
    assert compaction.removed == 52
    assert len(s.messages) == 1 + 9
    assert s.messages[0].text == SUMMARY_HEADER + "They talked about u0..u52."
    assert s.messages[1].text == "u52"
    assert s.cacheable_messages == 1
    request = provider.requests[0]
    assert request.system == "Summarise tersely."
    assert "user: u0" in request.messages[0].text and "u52" not in request.messages[0].text


async def test_cut_never_splits_a_tool_call_from_its_result() -> None:
    messages = chat(56)
    messages += [
        Message.user("run it"),
        *called(ToolUse(id="t", name="bash")),
        Message.assistant("done"),
        *called(ToolUse(id="u", name="x")),
        Message.assistant("a"),
        Message.assistant("b"),
        Message.assistant("c"),
    ]
    s = Session(id="s", messages=messages)
    compaction = await LLMCompressor(ScriptedProvider("summary")).compress(s)
    assert compaction is not None
    kept = s.messages[1:]
    assert kept[0].role is Role.USER and not kept[0].tool_results
    ids_used = {u.id for m in kept for u in m.tool_uses}
    ids_answered = {r.tool_use_id for m in kept for r in m.tool_results}
    assert ids_used == ids_answered


async def test_agent_sends_cacheable_prefix_and_store_keeps_the_summary() -> None:
    store = Store(":memory:")
    await store.create_session("s")
    for m in chat(61):
        await store.append_message("s", m)
    s = await store.load("s")
    assert s is not None
    provider = ScriptedProvider("the summary", "the answer")
    options = Options(compressor=LLMCompressor(provider), history=store)
    await Agent(provider, options=options).turn(s)
    assert provider.requests[1].cacheable_messages == 1
    assert provider.requests[1].messages[0].text.endswith("the summary")
    reloaded = await store.load("s")
    assert reloaded is not None
    assert reloaded.messages[0].text.endswith("the summary")
    assert [m.text for m in reloaded.messages[1:]] == [m.text for m in s.messages[1:]]
    assert reloaded.cacheable_messages == 1
    # Compressed-away messages are still stored for search.
    assert await store.search("u2") != []
    store.close()


async def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        LLMCompressor(ScriptedProvider(), trigger_messages=5, keep_recent=8)


async def test_past_its_window_a_session_shows_the_model_its_newer_half() -> None:
    """A daemon's chats are bounded in memory and in what each request carries: past
    `history_window` messages, the older half are left out (the store keeps them)."""
    provider = ScriptedProvider("ok")
    store = Store(":memory:")
    agent = Agent(provider, options=Options(history=store, history_window=10))
    session = await store.create_session("s")
    for message in chat(10):
        await agent.append(session, message)
    await agent.reply(session, "u10")  # 11 messages: the window is passed
    [request] = provider.requests
    # The cut lands on the first user message of the newer half: u6 (11 - 5 = 6).
    assert [m.text for m in request.messages] == ["u6", "a7", "u8", "a9", "u10"]
    assert [m.text for m in session.messages] == ["u6", "a7", "u8", "a9", "u10", "ok"]
    stored = await store.load("s")
    assert stored is not None and len(stored.messages) == 12
    store.close()


async def test_the_window_never_separates_a_tool_call_from_its_result() -> None:
    messages = [
        *chat(6),
        *called(ToolUse(id="t1", name="read", input={"path": "a"})),
        Message.assistant("done"),
        Message.user("next"),
        Message.assistant("sure"),
        Message.user("go on"),
    ]
    session = Session(id="s", messages=messages)
    agent = Agent(ScriptedProvider("ok"), options=Options(history_window=10))
    await agent.turn(session)
    # Half of 10 from the end of 12 is the tool result: the cut moves on to the next user text.
    assert session.messages[0].text == "next"


async def test_the_window_keeps_a_summary_at_the_start() -> None:
    summary = Message.user(SUMMARY_HEADER + "earlier")
    session = Session(id="s", messages=[summary, *chat(12)], cacheable_messages=1)
    session.messages.append(Message.user("last"))
    agent = Agent(ScriptedProvider("ok"), options=Options(history_window=10))
    await agent.turn(session)
    assert session.messages[0] is summary and session.cacheable_messages == 1
    assert [m.text for m in session.messages[1:]] == ["u8", "a9", "u10", "a11", "last", "ok"]
