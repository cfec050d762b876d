"""History repair: a dangling tool call (after a crash) never breaks the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rousseau.agent import Agent, Content, Message, Role, Session, ToolResult, ToolUse
from rousseau.agent.repair import INTERRUPTED, repair_history
from rousseau.agent.testing import ScriptedProvider
from rousseau.state import Store

pytestmark = pytest.mark.anyio


def call(*ids: str) -> Message:
    return Message(
        role=Role.ASSISTANT,
        content=[Content.of_tool_use(ToolUse(id=i, name="bash", input={})) for i in ids],
    )


def results(*ids: str) -> Message:
    return Message(
        role=Role.USER,
        content=[Content.of_tool_result(ToolResult(tool_use_id=i, content="ok")) for i in ids],
    )


def test_dangling_call_before_a_new_user_message_is_closed() -> None:
    messages = [Message.user("run"), call("a", "b"), Message.user("hello again")]
    assert repair_history(messages) == 2
    fixed = messages[2]
    assert [r.tool_use_id for r in fixed.tool_results] == ["a", "b"]
    assert all(r.is_error and r.content == INTERRUPTED for r in fixed.tool_results)
    assert fixed.content[-1].text == "hello again"  # results first, as the APIs require


def test_partly_answered_call_gets_the_missing_result() -> None:
    messages = [Message.user("run"), call("a", "b"), results("a")]
    assert repair_history(messages) == 1
    assert {r.tool_use_id for r in messages[2].tool_results} == {"a", "b"}


def test_dangling_call_at_the_end_gets_a_results_message() -> None:
    messages = [Message.user("run"), call("a")]
    assert repair_history(messages) == 1
    assert messages[-1].role is Role.USER and messages[-1].tool_results[0].tool_use_id == "a"


def test_orphaned_results_are_dropped() -> None:
    messages = [Message.user("hi"), Message.assistant("hello"), results("ghost"), Message.user("x")]
    assert repair_history(messages) == 1
    assert messages[2].tool_results == [] and messages[2].text


def test_a_healthy_history_is_untouched() -> None:
    messages = [Message.user("run"), call("a"), results("a"), Message.assistant("done")]
    before = [m.content[:] for m in messages]
    assert repair_history(messages) == 0
    assert [m.content for m in messages] == before


async def test_a_session_stored_mid_call_continues_after_a_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.append_message("s", Message.user("run the build"))
    await store.append_message("s", call("t1"))  # the process died here
    store.close()

    store = Store(tmp_path / "s.db")
    session = await store.load("s")
    assert session is not None
    provider = ScriptedProvider("Sorry, the build was interrupted. Shall I retry?")
    agent = Agent(provider)
    response = await agent.reply(session, "what happened?")
    assert "interrupted" in response.message.text
    sent = provider.requests[0].messages
    assert sent[2].tool_results[0].tool_use_id == "t1"
    assert sent[2].text == "what happened?"
    store.close()


async def test_repair_runs_once_per_turn_start() -> None:
    session = Session(id="s", messages=[Message.user("a"), call("x"), Message.user("b")])
    provider = ScriptedProvider("fine")
    await Agent(provider).turn(session)
    assert len(session.messages[2].tool_results) == 1


async def test_a_turn_checks_only_what_came_since_the_last_one() -> None:
    # Per-turn work must not grow with the session: a checked prefix is not looked at again.
    history = [m for i in range(100) for m in (Message.user(f"q{i}"), Message.assistant("a"))]
    session = Session(id="s", messages=history)
    agent = Agent(ScriptedProvider("one", "two"))
    await agent.turn(session)
    # Planted in place, where nothing but a rescan would find it (nothing in rousseau
    # rewrites a message it already holds); and a new dangling call at the end.
    session.messages[2].content.append(results("old").content[0])
    session.messages += [call("new"), Message.user("and now?")]
    await agent.turn(session)
    assert session.messages[2].tool_results[0].tool_use_id == "old"  # not rescanned
    assert session.messages[-2].tool_results[0].tool_use_id == "new"  # the new call closed


async def test_a_history_replaced_since_the_last_turn_is_checked_whole() -> None:
    session = Session(id="s", messages=[Message.user("a")])
    agent = Agent(ScriptedProvider("one", "two"))
    await agent.turn(session)
    # As a reload or a compaction does: a new list, an orphaned result near its start.
    session.messages = [Message.user("a"), results("gone"), *session.messages[1:]]
    session.messages.append(Message.user("b"))
    await agent.turn(session)
    assert not session.messages[1].tool_results
