"""The delegate tool through the daemon: a named agent or a fresh sub-agent answers a task in
a session of its own, children run side by side within max_children and nest within
max_depth, /stop ends them, their approvals reach the owners and their cost the parent's."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Request, Response, Usage
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply, tools_reply
from rousseau.config import load_config
from rousseau.router import ChatPolicy
from rousseau.state import Store
from rousseau.state.sqlite_spending import SqliteSpending
from rousseau.tools.delegate import SUB_AGENT_PROMPT
from rousseau.transports.base import MemoryTransport

pytestmark = pytest.mark.anyio

RESEARCH = "You are the researcher."
PARENT = "You are the parent."

Model = Callable[[Request], "Response | Any"]


def write_config(tmp: Path, delegation: dict[str, Any], **agent: Any) -> Path:
    path = tmp / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp / "s.db")},
                "prices": {"function": {"input": 10.0, "output": 20.0}},
                "agent": {
                    "system_prompt": PARENT,
                    "workspace": str(tmp / "ws"),
                    "delegation": delegation,
                    "approver": {"mode": "allow_all"},
                    **agent,
                },
                "agents": {
                    "researcher": {"system_prompt": RESEARCH, "workspace": str(tmp / "r")},
                },
            }
        )
    )
    return path


class Chat:
    def __init__(self, transport: MemoryTransport, provider: FunctionProvider) -> None:
        self.transport = transport
        self.provider = provider
        self.said = 0

    async def send(self, text: str, sender: str = "alice") -> None:
        self.said += 1
        await self.transport.inject(
            text, sender_id=sender, chat_id=sender, message_id=f"{text}#{self.said}"
        )

    async def reply(self, chat: str = "alice", count: int = 1) -> list[str]:
        with anyio.fail_after(20):
            while len(found := [m.text for m in self.transport.sent if m.chat_id == chat]) < count:
                await anyio.sleep(0.01)
        return found

    def children(self) -> list[Request]:
        return [r for r in self.provider.requests if not r.system.startswith(PARENT)]


@asynccontextmanager
async def daemon(path: Path, model: Model) -> AsyncIterator[Chat]:
    from rousseau.daemon import Daemon

    transport = MemoryTransport()
    provider = FunctionProvider(model)
    config = load_config(str(path), {"HOME": str(path.parent)})
    running = Daemon(
        config,
        transports={"memory": transport},
        chat_policies={"memory": ChatPolicy(allowlist=frozenset({"alice", "owner"}))},
        provider=provider,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(running.run)
        with anyio.fail_after(20):
            while not transport.connected:
                await anyio.sleep(0.02)
        yield Chat(transport, provider)
        running.stop()


def result_of(request: Request) -> str:
    return "\n".join(r.content for r in request.messages[-1].tool_results)


async def test_a_named_agent_answers_the_task_and_the_parent_uses_its_answer(
    tmp_path: Path,
) -> None:
    def model(request: Request) -> Response:
        if request.system.startswith(RESEARCH):
            return text_reply("the moon is 384,400 km away", usage=Usage(input_tokens=1000))
        if request.messages[-1].tool_results:
            return text_reply("parent says: " + result_of(request))
        return tool_reply("delegate", task="How far is the moon?", agent="researcher")

    path = write_config(tmp_path, {"agents": ["researcher"]})
    async with daemon(path, model) as chat:
        await chat.send("ask the researcher")
        [answer] = await chat.reply()
    [child] = chat.children()
    assert child.system.startswith(RESEARCH)  # its agent's own prompt
    assert child.messages[0].text == "How far is the moon?"  # and the task, alone
    assert answer.startswith("parent says: [researcher, session ")
    assert answer.endswith("the moon is 384,400 km away")
    store = Store(tmp_path / "s.db")
    try:
        [parent] = [s for s in store.list_sync() if s.parent is None]
        [kept] = await store.children(parent.id)
        assert kept.agent == "researcher" and kept.title.startswith("researcher: How far")
        assert (await store.load(kept.id)) is not None
        # the child's call is charged to the parent's session: $0.01
        assert await SqliteSpending(store).session_cost(parent.id) == pytest.approx(0.01)
        assert await SqliteSpending(store).session_cost(kept.id) == 0
    finally:
        store.close()


async def test_children_run_side_by_side_within_max_children(tmp_path: Path) -> None:
    running = [0]
    most = [0]

    async def model(request: Request) -> Response:
        if request.system.startswith(SUB_AGENT_PROMPT):
            running[0] += 1
            most[0] = max(most[0], running[0])
            await anyio.sleep(0.2)
            running[0] -= 1
            return text_reply("done " + request.messages[0].text)
        if request.messages[-1].tool_results:
            results = request.messages[-1].tool_results
            return text_reply(" | ".join(r.content.split("\n")[-1] for r in results))
        return tools_reply(
            [("delegate", {"task": f"job {i}", "tools": ["read"]}) for i in range(5)]
        )

    path = write_config(tmp_path, {"max_children": 2})
    async with daemon(path, model) as chat:
        await chat.send("split it")
        [answer] = await chat.reply()
    assert answer == " | ".join(f"done job {i}" for i in range(5))  # each, in order
    assert most[0] == 2  # side by side, never more than max_children
    children = chat.children()
    assert {tuple(t.name for t in c.tools) for c in children} == {("read",)}


async def test_max_depth_holds_and_a_disallowed_agent_is_a_tool_error(tmp_path: Path) -> None:
    seen: list[tuple[int, list[str]]] = []

    def model(request: Request) -> Response:
        depth = request.messages[0].text.count(">")
        seen.append((depth, [t.name for t in request.tools]))
        last = request.messages[-1]
        if last.tool_results:
            return text_reply(f"{'>' * depth}got: " + result_of(request))
        if depth == 0 and last.text == "who?":
            return tool_reply("delegate", task="hi", agent="stranger")
        # each level hands the task on, one '>' deeper, even past where it is offered
        return tool_reply("delegate", task=">" * (depth + 1) + "go")

    path = write_config(tmp_path, {"max_depth": 2, "agents": ["researcher"]})
    async with daemon(path, model) as chat:
        await chat.send("who?")
        [refused] = await chat.reply()
        await chat.send("go")
        answers = await chat.reply(count=2)
    assert "'stranger' is not one to delegate to (delegation.agents: researcher)" in refused
    offered = {depth: "delegate" in tools for depth, tools in seen}
    assert offered == {0: True, 1: True, 2: False}  # the grandchild is not offered it...
    assert "tool not found: delegate" in answers[1]  # ...and its call is refused
    assert max(depth for depth, _ in seen) == 2


async def test_stop_ends_a_running_child(tmp_path: Path) -> None:
    started = anyio.Event()
    finished: list[str] = []

    async def model(request: Request) -> Response:
        if request.system.startswith(SUB_AGENT_PROMPT):
            started.set()
            await anyio.sleep(3)
            finished.append("child")
            return text_reply("too late")
        return tool_reply("delegate", task="take your time")

    path = write_config(tmp_path, {})
    async with daemon(path, model) as chat:
        await chat.send("start")
        with anyio.fail_after(10):
            await started.wait()
        await chat.send("/stop")
        replies = await chat.reply()
        await anyio.sleep(3.5)
    assert replies[0] == "Stopped."
    assert finished == []  # no child request completed after /stop


async def test_a_childs_approval_reaches_the_owner(tmp_path: Path) -> None:
    def model(request: Request) -> Response:
        if request.system.startswith(SUB_AGENT_PROMPT):
            if request.messages[-1].tool_results:
                return text_reply("child: " + result_of(request))
            return tool_reply("write", path="note.txt", content="hello")
        if request.messages[-1].tool_results:
            return text_reply(result_of(request))
        return tool_reply("delegate", task="write a note")

    approver = {
        "rules": [{"tool": "delegate", "action": "allow"}, {"tool": "write", "action": "ask"}]
    }
    path = write_config(tmp_path, {}, approver={**approver, "owners": ["memory:owner"]})
    async with daemon(path, model) as chat:
        await chat.send("note it")
        [question] = await chat.reply("owner")
        code = re.search(r"yes (\w+)", question)
        assert code is not None and "Approve write?" in question
        await chat.send(f"yes {code.group(1)}", sender="owner")
        [answer] = await chat.reply()
    assert answer.endswith("child: wrote note.txt") or "note.txt" in answer
    assert (tmp_path / "ws" / "note.txt").read_text() == "hello"


def test_session_list_shows_a_helper_under_its_parent(tmp_path: Path) -> None:
    import subprocess

    from tests.helpers import ROUSSEAU

    def model(request: Request) -> Response:
        if request.system.startswith(SUB_AGENT_PROMPT):
            return text_reply("helped")
        if request.messages[-1].tool_results:
            return text_reply("thanks")
        return tool_reply("delegate", task="help me")

    async def talk() -> None:
        async with daemon(path, model) as chat:
            await chat.send("go")
            await chat.reply()

    path = write_config(tmp_path, {})
    anyio.run(talk)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = [*ROUSSEAU, "--config", str(path), "session"]
    listed = subprocess.run([*run, "list"], capture_output=True, text=True, env=env, check=True)
    lines = listed.stdout.splitlines()[1:]
    parent = next(line.split()[0] for line in lines if "↳" not in line)
    helper = next(line for line in lines if "↳ sub-agent: help me" in line)
    assert helper.split()[0].startswith(parent + "-")
    assert lines.index(helper) == 1 + next(i for i, line in enumerate(lines) if parent in line)
    shown = subprocess.run(
        [*run, "show", parent], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert f"-- helper session {helper.split()[0]}: sub-agent: help me" in shown


async def test_a_childs_steps_show_in_the_parents_preview() -> None:
    from rousseau.agent import Agent, AllowAllApprover, Options
    from rousseau.router import RateLimiter, Router, RouterSettings
    from rousseau.streaming import StreamSettings
    from rousseau.tools.base import Registry, function_tool
    from rousseau.tools.delegate import DelegateTool, Delegation
    from tests.helpers import routing
    from tests.test_router import EditingTransport

    looking = anyio.Event()
    go = anyio.Event()

    async def lookup(input: dict[str, Any], call: Any) -> Any:
        from rousseau.agent import ToolOutput

        looking.set()
        await go.wait()
        return ToolOutput(content="found it")

    def model(request: Request) -> Response:
        if request.system.startswith(SUB_AGENT_PROMPT):
            if request.messages[-1].tool_results:
                return text_reply("child done")
            return tool_reply("lookup", q="x")
        if request.messages[-1].tool_results:
            return text_reply("all done")
        return tool_reply("delegate", task="look it up")

    store = Store(":memory:")
    registry = Registry()
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    registry.register(function_tool("lookup", "Look something up.", schema, lookup))
    tool = DelegateTool(agent="default", store=store, agents=[])
    registry.register(tool)
    options = Options(history=store, approver=AllowAllApprover())
    agent = Agent(FunctionProvider(model), registry, options)
    tool.bind(Delegation(caller=agent))
    editing = EditingTransport()
    router = Router(
        agent=agent,
        store=store,
        transports={"memory": editing},
        policies={"memory": ChatPolicy(allowlist=frozenset({"user"}))},
        rate_limiter=RateLimiter((100, 1.0), {}, 100),
        settings=RouterSettings(streaming={"memory": StreamSettings(interval=0.01)}),
    )
    async with routing(router, editing):
        await editing.inject("go")
        with anyio.fail_after(10):
            await looking.wait()
            while not any("↳ sub-agent: lookup" in text for _, text in editing.previews):
                await anyio.sleep(0.02)
        go.set()
        [answer] = await editing.wait_sent(1)
    store.close()
    assert answer.text == "all done"
