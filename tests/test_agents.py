"""Several agents in one daemon: routes pick the agent, and agents are kept apart.

The daemon runs Telegram and Slack (on their fakes) and three agents, all answered by the fake
OpenAI-compatible model, which records the system prompt, model and tools of each request:
the Telegram DM reaches the default (private) agent, the Telegram group the family agent
(read and grep only), Slack the work agent (its own model).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Agent, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.agents import Routes
from rousseau.config import ConfigError, RouteConfig, load_config
from rousseau.cron import CronJobs
from rousseau.daemon import Daemon
from rousseau.messages import DEFAULT_AGENT, Inbound
from rousseau.router import ChatPolicy, RateLimiter, Router, RouterSettings
from rousseau.state import Store
from rousseau.state.sqlite_cron import SqliteCronJobs
from rousseau.transports.base import MemoryTransport
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.helpers import ROUSSEAU, routing
from tests.transports.conformance import File
from tests.transports.harness_slack import SlackHarness
from tests.transports.harness_telegram import TelegramHarness
from tests.transports.test_conformance import act

pytestmark = pytest.mark.anyio


def model(recorded: Recorded) -> Reply:
    """Runs what it is told (`run: TOOL JSON`), then reports the result; else echoes."""
    last = recorded.body["messages"][-1]
    if last["role"] == "tool":
        return openai_stream(openai_completion(f"result: {last['content']}"))
    text = str(last.get("content"))
    _, run, call = text.partition("run: ")  # in a group, after the sender's name
    if run:
        tool, _, args = call.partition(" ")
        return openai_stream(openai_completion(tool_calls=[(tool, json.loads(args))]))
    return openai_stream(openai_completion(f"echo: {text}"))


@asynccontextmanager
async def daemon(tmp_path: Path, **extra: Any) -> AsyncIterator[tuple[Any, Any, FakeLLMServer]]:
    llm = FakeLLMServer().start()
    llm.responder = model
    telegram, slack = TelegramHarness(), SlackHarness()
    data = {
        "provider": "openai",
        "openai": {"api_key": "sk-test", "base_url": llm.url + "/v1", "model": "private-model"},
        "agent": {
            "system_prompt": "You are the private assistant.",
            "workspace": str(tmp_path / "private"),
            "approver": {"mode": "allow_all"},
            "recall": {"scope": "all"},
        },
        **extra,
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    config = load_config(
        str(path), {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")}
    )
    transports = {"telegram": telegram.transport(), "slack": slack.transport()}
    owners = {"telegram": telegram.owner, "slack": slack.owner}
    running = Daemon(
        config,
        transports=transports,
        chat_policies={
            name: ChatPolicy(allowlist=frozenset([owner]), require_mention=False)
            for name, owner in owners.items()
        },
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(running.run)
            with anyio.fail_after(20):
                while not all(t.connected for t in transports.values()):
                    await anyio.sleep(0.02)
            yield telegram, slack, llm
            running.stop()
    finally:
        slack.close()
        llm.stop()


AGENTS = {
    "agents": {
        "family": {
            "system_prompt": "You help a family.",
            "workspace": "FAMILY",
            "tools": ["read", "grep"],
        },
        "work": {"system_prompt": "You do work.", "model": "work-model", "workspace": "WORK"},
    },
    "routes": [{"transport": "telegram", "chat": "-100", "agent": "family"}],
    "slack": {"agent": "work"},
}


def with_workspaces(tmp_path: Path) -> dict[str, Any]:
    agents = json.loads(json.dumps(AGENTS))
    for name, agent in agents["agents"].items():
        agent["workspace"] = str(tmp_path / name)
    return agents


async def answer_to(harness: Any, chat: str, send: Any, text: str) -> str:
    """Send `text` with `send`; wait for the next reply in `chat`, and return it."""

    def replies() -> list[str]:
        return [d.text for d in harness.delivered() if d.chat == chat]

    before = len(replies())
    await act(send, text)
    with anyio.fail_after(20):
        while len(now := replies()) <= before:
            await anyio.sleep(0.05)
    return now[before]


def requests(llm: FakeLLMServer) -> list[Recorded]:
    return [r for r in llm.posts() if r.path.endswith("/chat/completions")]


def asked(llm: FakeLLMServer, text: str) -> dict[str, Any]:
    """The request that asked about `text` (in a group, after its sender's name)."""
    [found] = [r.body for r in requests(llm) if r.body["messages"][-1]["content"].endswith(text)]
    return found


TINY_MCP = {
    "command": sys.executable,
    "args": [str(Path(__file__).parent / "mcp" / "tiny_server.py")],
}


async def test_each_chat_reaches_its_agent_and_agents_stay_apart(tmp_path: Path) -> None:
    setup = {**with_workspaces(tmp_path), "mcp_servers": {"tiny": TINY_MCP}}
    async with daemon(tmp_path, **setup) as (telegram, slack, llm):
        dm = telegram.dm
        group = lambda text: telegram.group(text, mentioned=True)  # noqa: E731

        # Each chat reaches the agent its route names: prompt, model and tools.
        await answer_to(telegram, telegram.dm_chat, dm, "hello PLUMTREE")
        await answer_to(telegram, telegram.group_chat, group, "hello family")
        await answer_to(slack, slack.dm_chat, slack.dm, "hello work")
        private, family, work = (
            asked(llm, t) for t in ("hello PLUMTREE", "hello family", "hello work")
        )
        assert private["messages"][0]["content"].startswith("You are the private assistant.")
        assert family["messages"][0]["content"].startswith("You help a family.")
        assert work["messages"][0]["content"].startswith("You do work.")
        assert (private["model"], family["model"], work["model"]) == (
            "private-model",
            "private-model",
            "work-model",
        )
        assert sorted(t["function"]["name"] for t in family["tools"]) == ["grep", "read"]
        assert {"bash", "tiny__shout"} <= {t["function"]["name"] for t in private["tools"]}
        assert "tiny__shout" in {t["function"]["name"] for t in work["tools"]}  # MCP: all

        # Recall in one agent never returns text from another (recall scope: all).
        await answer_to(telegram, telegram.group_chat, group, "what about PLUMTREE")
        prompt = requests(llm)[-1].body["messages"][0]["content"]
        assert "PLUMTREE" not in prompt  # no snippet of the private chat
        await answer_to(telegram, telegram.dm_chat, dm, "/new")  # so this agent may recall
        await answer_to(telegram, telegram.dm_chat, dm, "PLUMTREE again")
        assert "hello PLUMTREE" in requests(llm)[-1].body["messages"][0]["content"]

        # The family agent has no bash; the private one runs it.
        run = 'run: bash {"command": "echo ran-here"}'
        family_said = await answer_to(telegram, telegram.group_chat, group, run)
        private_said = await answer_to(telegram, telegram.dm_chat, dm, run)
        assert "ran-here" not in family_said and "bash" in family_said
        assert "ran-here" in private_said

        # Files written by one agent's tools cannot be read through another's.
        write = 'run: write {"path": "secret.txt", "content": "the private secret"}'
        await answer_to(telegram, telegram.dm_chat, dm, write)
        assert (tmp_path / "private" / "secret.txt").read_text() == "the private secret"
        read = 'run: read {"path": "secret.txt"}'
        assert "the private secret" in await answer_to(telegram, telegram.dm_chat, dm, read)
        assert "the private secret" not in await answer_to(
            telegram, telegram.group_chat, group, read
        )
        outside = 'run: read {"path": "../private/secret.txt"}'
        assert "the private secret" not in await answer_to(
            telegram, telegram.group_chat, group, outside
        )

        # A file sent to the work agent is in its workspace, not in the one it arrived in.
        note = File(name="notes.txt", media_type="text/plain", data=b"quarterly numbers")
        said = await answer_to(slack, slack.dm_chat, lambda t: slack.dm_file(t, note), "see file")
        assert "inbox/" in said  # the model was told where its tools find it
        assert [p.read_bytes() for p in (tmp_path / "work" / "inbox").rglob("*.txt")] == [
            b"quarterly numbers"
        ]
        assert not list((tmp_path / "private").rglob("notes*.txt"))


async def test_without_agents_every_chat_has_the_one_agent(tmp_path: Path) -> None:
    async with daemon(tmp_path) as (telegram, slack, llm):
        await answer_to(
            telegram, telegram.group_chat, lambda t: telegram.group(t, mentioned=True), "hi group"
        )
        await answer_to(slack, slack.dm_chat, slack.dm, "hi slack")
    for r in requests(llm):
        assert r.body["messages"][0]["content"].startswith("You are the private assistant.")
        assert r.body["model"] == "private-model"


def test_routes_match_in_order_then_the_transport_then_the_default() -> None:
    routes = Routes(
        routes=[
            RouteConfig(agent="family", transport="whatsapp", chat="*@g.us"),
            RouteConfig(agent="boss", transport="slack", sender="U1"),
            RouteConfig(agent="work", transport="slack"),
        ],
        by_transport={"telegram": "private"},
    )

    def agent(transport: str, chat: str, sender: str = "x") -> str:
        inbound = Inbound(
            transport=transport, chat_id=chat, sender_id=sender, message_id="1", text=""
        )
        return routes.agent_of(inbound)

    assert agent("whatsapp", "123@g.us") == "family"
    assert agent("whatsapp", "123@s.whatsapp.net") == DEFAULT_AGENT
    assert agent("slack", "C1", sender="U1") == "boss"
    assert agent("slack", "C1", sender="U2") == "work"
    assert agent("telegram", "42") == "private"


def test_a_route_to_an_unknown_agent_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"agents": {"work": {}}, "routes": [{"agent": "wrok"}]}))
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=r"routes\[0\]\.agent: no agent named 'wrok'"):
        load_config(str(path), {"HOME": str(tmp_path)})


def test_an_agent_inherits_what_it_leaves_unset(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "agent": {"system_prompt": "base", "bash_timeout": "5s"},
                "agents": {"work": {"system_prompt": "work"}},
            }
        )
    )
    path.chmod(0o600)
    config = load_config(str(path), {"HOME": str(tmp_path)})
    work = config.for_agent("work").agent
    assert (work.system_prompt, work.bash_timeout) == ("work", 5.0)
    assert config.for_agent(DEFAULT_AGENT) is config


async def test_a_busy_agent_at_its_limit_never_holds_up_another() -> None:
    release = anyio.Event()
    running_now: list[str] = []

    async def family(request: Request) -> Response:
        running_now.append(request.messages[-1].text)
        await release.wait()
        return text_reply("family answer")

    store = Store(":memory:")
    transport = MemoryTransport()
    router = Router(
        agent=Agent(FunctionProvider(lambda r: text_reply("private answer"))),
        agents={"family": Agent(FunctionProvider(family))},
        routes=Routes(routes=[RouteConfig(agent="family", chat="group*")]),
        settings=RouterSettings(agent_turns={"family": 1}, max_concurrent_turns=2),
        store=store,
        transports={"memory": transport},
        policies={"memory": ChatPolicy(policy="open", require_mention=False)},
        rate_limiter=RateLimiter((100, 1.0), {}, 100),
    )
    async with routing(router, transport):
        for group in ("group1", "group2", "group3"):  # three sessions of the family agent
            await transport.inject(f"hi from {group}", chat_id=group)
        await transport.inject("hi from me", chat_id="me")
        [answer] = await transport.wait_sent(1)
        assert (answer.chat_id, answer.text) == ("me", "private answer")
        assert len(running_now) == 1  # one family turn at a time, as configured
        release.set()
        await transport.wait_sent(4)
    store.close()


async def test_a_cron_job_runs_on_the_agent_it_names(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    jobs = CronJobs(SqliteCronJobs(store))
    await jobs.add("standup", "@every 1s", "write the standup", "slack:D0DM", agent="work")
    await jobs.add("lost", "@every 1s", "nobody runs this", "slack:D0DM", agent="gone")
    store.close()
    async with daemon(tmp_path, **with_workspaces(tmp_path)) as (_telegram, slack, llm):
        with anyio.fail_after(20):
            while not any("write the standup" in d.text for d in slack.delivered()):
                await anyio.sleep(0.1)
            while not any("Cron job lost failed" in d.text for d in slack.delivered()):
                await anyio.sleep(0.1)
    body = asked(llm, "write the standup")
    assert body["messages"][0]["content"].startswith("You do work.")
    assert body["model"] == "work-model"
    failed = [d.text for d in slack.delivered() if "Cron job lost failed" in d.text]
    assert "no agent named 'gone'" in failed[0]
    assert not [r for r in requests(llm) if "nobody runs this" in str(r.body["messages"])]


def test_cron_add_names_an_agent_that_exists(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"agents": {"work": {}}, "state": {"path": str(tmp_path / "s")}}))
    path.chmod(0o600)
    base = [*ROUSSEAU, "--config", str(path), "cron", "add", "--name", "n", "--schedule"]
    base += ["@daily", "--prompt", "p", "--deliver-to", "telegram:42", "--agent"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    wrong = subprocess.run([*base, "wrok"], env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2
    assert "--agent: no agent named 'wrok' (there are: default, work)" in wrong.stderr
    right = subprocess.run([*base, "work"], env=env, capture_output=True, text=True, timeout=60)
    assert right.returncode == 0 and "(agent work)" in right.stdout


async def test_an_agent_asks_its_own_owners(tmp_path: Path) -> None:
    ask_me = {"mode": "ask", "owners": ["telegram:42"]}
    setup = {
        "agent": {
            "system_prompt": "You are the private assistant.",
            "workspace": str(tmp_path / "private"),
            "approver": ask_me,
        },
        "agents": {
            "work": {
                "workspace": str(tmp_path / "work"),
                "approver": {"mode": "ask", "owners": ["slack:U0OWNER"]},
            }
        },
        "slack": {"agent": "work"},
    }
    async with daemon(tmp_path, **setup) as (telegram, slack, _llm):
        run = 'run: bash {"command": "echo approved-work"}'
        asked_text = await answer_to(slack, slack.dm_chat, slack.dm, run)
        code = re.search(r"\[([A-Z0-9]{4})\]", asked_text)
        assert code is not None, asked_text
        # The default agent's owner is not the work agent's: their answer is refused.
        refused = await answer_to(telegram, telegram.dm_chat, telegram.dm, f"yes {code[1]}")
        assert refused == f"Only an owner can answer {code[1]}."
        await answer_to(slack, slack.dm_chat, slack.dm, f"yes {code[1]}")
        with anyio.fail_after(20):
            while not any("approved-work" in d.text for d in slack.delivered()):
                await anyio.sleep(0.1)
