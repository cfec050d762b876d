"""Memory a person can trust, through the daemon with a scripted model: what the agent keeps
about a person reaches the next conversation with that person only (not another person's,
not another agent's), /memory lists it and /forget deletes it, the bound holds, and it all
survives a restart. Before a compaction, the model is asked once, with the memory tool
alone, to save what should outlive the summary; the compressed messages stay searchable."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response
from rousseau.agent.compress import DEFAULT_PROMPT
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import Config, load_config
from rousseau.messages import Inbound, current_inbound
from rousseau.metrics import Metrics
from rousseau.router import ChatPolicy
from rousseau.state import Store
from rousseau.state.sqlite_profiles import SqliteProfiles
from rousseau.tools.memory import FLUSH_PROMPT, HEADER
from rousseau.transports.base import MemoryTransport
from tests.helpers import ROUSSEAU

pytestmark = pytest.mark.anyio

WORK = "You do the work."


def model(request: Request) -> Response:
    """'remember X' adds X to the profile; a tool's result is said back; else 'ok'."""
    last = request.messages[-1]
    if last.tool_results:
        return text_reply("tool: " + last.tool_results[0].content)
    if last.text.startswith("remember "):
        return tool_reply("memory", action="add", text=last.text.removeprefix("remember "))
    return text_reply("ok")


def daemon_config(tmp: Path) -> Config:
    path = tmp / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp / "s.db")},
                "agent": {"workspace": str(tmp / "ws"), "memory": {"max_chars": 100}},
                "agents": {"work": {"system_prompt": WORK, "workspace": str(tmp / "work")}},
                "routes": [{"transport": "memory", "chat": "w", "agent": "work"}],
            }
        )
    )
    return load_config(str(path), {"HOME": str(tmp)})


class Chat:
    """A daemon on the in-memory transport, its model's requests, and a way to talk to it."""

    def __init__(self, transport: MemoryTransport, provider: FunctionProvider) -> None:
        self.transport = transport
        self.provider = provider
        self.said = 0

    async def say(self, text: str, sender: str = "alice", chat: str = "", **kw: Any) -> str:
        """Send `text`; the reply (each message has an id of its own, across restarts)."""
        before = len(self.transport.sent)
        self.said += 1
        await self.transport.inject(
            text, sender_id=sender, chat_id=chat or sender, message_id=f"{text}#{self.said}", **kw
        )
        with anyio.fail_after(20):
            sent = await self.transport.wait_sent(before + 1)
        return sent[before].text

    def system(self) -> str:
        """The system prompt of the latest model request."""
        return self.provider.requests[-1].system


@asynccontextmanager
async def daemon(tmp: Path, said: int = 0) -> AsyncIterator[Chat]:
    from rousseau.daemon import Daemon

    transport = MemoryTransport()
    provider = FunctionProvider(model)
    running = Daemon(
        daemon_config(tmp),
        transports={"memory": transport},
        chat_policies={"memory": ChatPolicy(allowlist=frozenset({"alice", "bob", "carol"}))},
        provider=provider,
    )
    chat = Chat(transport, provider)
    chat.said = said
    async with anyio.create_task_group() as tg:
        tg.start_soon(running.run)
        with anyio.fail_after(20):
            while not transport.connected:
                await anyio.sleep(0.02)
        yield chat
        running.stop()


async def test_a_profile_reaches_its_person_only_and_survives_a_restart(tmp_path: Path) -> None:
    async with daemon(tmp_path) as chat:
        assert await chat.say("/memory") == "I keep nothing about you yet."
        added = await chat.say("remember Alice keeps bees")
        assert "added: Alice keeps bees" in added
        assert await chat.say("/new") == "Started a new conversation."
        await chat.say("what do I keep?")
        assert f"{HEADER}\n- [" in chat.system() and "] Alice keeps bees" in chat.system()
        await chat.say("hello", sender="bob")
        assert "bees" not in chat.system() and HEADER not in chat.system()
        await chat.say("hello from work", chat="w")  # alice, talking to the work agent
        assert chat.system().startswith(WORK) and "bees" not in chat.system()
        listed = await chat.say("/memory")
        assert listed.startswith("What I keep about you:\n1. [")
        assert "] Alice keeps bees\n" in listed and "/forget N" in listed
        assert await chat.say("/memory", sender="bob") == "I keep nothing about you yet."
        group = await chat.say("/memory", chat="g", is_group=True, mentioned=True)
        assert "only in a private chat" in group and "bees" not in group
        said = chat.said
    async with daemon(tmp_path, said) as chat:  # a new daemon on the same state
        await chat.say("am I still known?")
        assert "Alice keeps bees" in chat.system()
        assert await chat.say("/forget 2") == "There is no entry 2: /memory lists them."
        assert await chat.say("/forget 1") == "Forgotten: Alice keeps bees"
        await chat.say("and now?")
        assert "bees" not in chat.system() and HEADER not in chat.system()
        assert await chat.say("/memory") == "I keep nothing about you yet."


async def test_the_bound_holds_and_the_model_is_told_to_consolidate(tmp_path: Path) -> None:
    async with daemon(tmp_path) as chat:
        first = "remember " + "carol " * 14  # 84 of the 100 characters
        assert "added" in await chat.say(first.strip(), sender="carol")
        full = await chat.say("remember carol also likes long walks", sender="carol")
        assert "full (83 of 100 characters used): consolidate first" in full
        [result] = chat.provider.requests[-1].messages[-1].tool_results
        assert result.is_error  # the model saw an error, not a success
        listed = await chat.say("/memory", sender="carol")
        assert listed.count("\n1. ") == 1 and "2. " not in listed
        # another person still has all their room
        assert "added" in await chat.say("remember " + "b" * 100, sender="bob")


def flush_model(request: Request) -> Response:
    """A flush request keeps what it learnt; a summary request summarises; else 'ok'."""
    if request.system.startswith(FLUSH_PROMPT):
        return tool_reply("memory", action="add", text="The census counts capybaras")
    if request.system == DEFAULT_PROMPT:
        return text_reply("They talked about a census.")
    return text_reply("ok")


ALICE = Inbound(transport="telegram", chat_id="42", sender_id="42", message_id="m", text="")


async def test_a_flush_comes_before_the_summary_and_what_it_keeps_stays(tmp_path: Path) -> None:
    from rousseau.assembly import build_agent
    from tests.helpers import config_in

    config = config_in(
        tmp_path,
        ROUSSEAU_AGENT_COMPRESSION_ENABLED="true",
        ROUSSEAU_AGENT_COMPRESSION_TRIGGER_MESSAGES="6",
        ROUSSEAU_AGENT_COMPRESSION_KEEP_RECENT="2",
    )
    store = Store(config.state.path)
    profiles = SqliteProfiles(store)
    metrics = Metrics()
    provider = FunctionProvider(flush_model)
    agent = build_agent(config, provider, store, profiles=profiles, metrics=metrics)
    session = await store.create_session()
    token = current_inbound.set(ALICE)  # the router's turn for telegram:42
    try:
        with capture_logs() as logs:
            for text in ["the capybara census is on Friday", "bring a pencil", "and a map", "hi"]:
                await agent.reply(session, text)
    finally:
        current_inbound.reset(token)
    kinds = [
        "flush"
        if r.system.startswith(FLUSH_PROMPT)
        else "summary"
        if r.system == DEFAULT_PROMPT
        else "turn"
        for r in provider.requests
    ]
    assert kinds == ["turn", "turn", "turn", "flush", "summary", "turn"]
    flush = provider.requests[3]
    assert [t.name for t in flush.tools] == ["memory"]  # the memory tool and nothing else
    assert "the capybara census is on Friday" in flush.messages[0].text
    assert "The profile is empty." in flush.system
    [entry] = await profiles.entries(agent="default", person="telegram:42")
    assert entry.text == "The census counts capybaras"
    assert "The census counts capybaras" in provider.requests[-1].system  # shown from now on
    flushed = [e for e in logs if e["event"] == "memory.flushed"]
    assert [(e["calls"], e["saved"]) for e in flushed] == [(1, 1)]
    sample = metrics.registry.get_sample_value
    assert sample("rousseau_memory_flushes_total", {"outcome": "saved"}) == 1
    [audited] = [c for c in await store.tool_calls() if c.tool == "memory"]
    assert (audited.decision, audited.outcome) == ("allow", "ok")
    loaded = await store.load(session.id)
    assert loaded is not None and loaded.messages[0].text.startswith("[Summary")
    store.close()
    found = await anyio.run_process(
        [*ROUSSEAU, "session", "search", "capybara"],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": config.state.path,
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a checkout's code
        },
        check=False,
    )
    out = found.stdout.decode()
    assert found.returncode == 0, found.stderr.decode()
    assert session.id in out and "capybara census" in out


async def test_no_flush_where_no_one_would_read_the_profile(tmp_path: Path) -> None:
    """In a group the profile is neither shown nor kept: no flush request is made."""
    from rousseau.assembly import build_agent
    from tests.helpers import config_in

    config = config_in(
        tmp_path,
        ROUSSEAU_AGENT_COMPRESSION_ENABLED="true",
        ROUSSEAU_AGENT_COMPRESSION_TRIGGER_MESSAGES="3",
        ROUSSEAU_AGENT_COMPRESSION_KEEP_RECENT="1",
    )
    with Store(":memory:") as store:
        metrics = Metrics()
        provider = FunctionProvider(flush_model)
        profiles = SqliteProfiles(store)
        agent = build_agent(config, provider, store, profiles=profiles, metrics=metrics)
        session = await store.create_session()
        token = current_inbound.set(Inbound(**{**_fields(ALICE), "is_group": True}))
        try:
            for text in ["one", "two", "three"]:
                await agent.reply(session, text)
        finally:
            current_inbound.reset(token)
        assert not any(r.system.startswith(FLUSH_PROMPT) for r in provider.requests)
        assert any(r.system == DEFAULT_PROMPT for r in provider.requests)
        assert await profiles.entries() == []
    sample = metrics.registry.get_sample_value
    assert sample("rousseau_memory_flushes_total", {"outcome": "skipped"}) == 1


def _fields(inbound: Inbound) -> dict[str, Any]:
    return {name: getattr(inbound, name) for name in inbound.__dataclass_fields__}


def rousseau(tmp: Path, *args: str) -> tuple[int, str, str]:
    """The `rousseau` command on the state in `tmp`, as a user runs it."""
    import subprocess

    done = subprocess.run(
        [*ROUSSEAU, *args],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a checkout's code
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def test_the_owner_sees_and_exports_every_profile(tmp_path: Path) -> None:
    async def fill() -> None:
        with Store(tmp_path / "s.db") as store:
            profiles = SqliteProfiles(store)
            for agent, person, text in [
                ("default", "telegram:42", "keeps bees"),
                ("default", "telegram:42", "lives in Lyon"),
                ("default", "telegram:43", "has a cat"),
                ("work", "telegram:42", "runs billing"),
            ]:
                assert await profiles.add_entry(agent, person, text, max_chars=99) == "done"

    anyio.run(fill)
    code, out, err = rousseau(tmp_path, "memory", "show")
    assert code == 0, err
    blocks = out.split("\n\n")
    assert blocks[0].splitlines()[0] == "telegram:42 (agent default): 2 entries, 23 characters"
    assert blocks[0].splitlines()[1].startswith("  1. [")
    assert blocks[0].splitlines()[2].endswith("] lives in Lyon")
    assert [b.splitlines()[0] for b in blocks[1:]] == [
        "telegram:43 (agent default): 1 entry, 9 characters",
        "telegram:42 (agent work): 1 entry, 12 characters",
    ]
    code, out, _ = rousseau(tmp_path, "memory", "show", "--agent", "work")
    assert out.startswith("telegram:42 (agent work)") and "bees" not in out
    code, out, _ = rousseau(tmp_path, "memory", "show", "telegram:43")
    assert "has a cat" in out and "bees" not in out and "billing" not in out
    code, out, _ = rousseau(tmp_path, "memory", "show", "telegram:44")
    assert (code, out) == (0, "no profiles of telegram:44 kept\n")
    code, out, err = rousseau(tmp_path, "memory", "export", "--agent", "default")
    assert code == 0, err
    exported = json.loads(out)["profiles"]
    assert [(p["person"], [e["text"] for e in p["entries"]]) for p in exported] == [
        ("telegram:42", ["keeps bees", "lives in Lyon"]),
        ("telegram:43", ["has a cat"]),
    ]
    assert all(p["agent"] == "default" for p in exported)
    assert exported[0]["entries"][0]["created_at"] > 0
