"""Costs and budgets through the whole daemon: a fake model reporting chosen token counts, the
price table, the limits of agent.budget, /usage, `rousseau usage` and the owners' notice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Request, Response, Usage
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import Config, load_config
from rousseau.costs import BUDGET_REPLY, SENDER_BUDGET_REPLY, Prices
from rousseau.costs.prices import FREE
from rousseau.router import ChatPolicy
from rousseau.transports.base import MemoryTransport
from tests.helpers import ROUSSEAU

pytestmark = pytest.mark.anyio

MILLION = 1_000_000
# The fake model is priced at $10 per million input tokens and $20 per million output: a call
# reading 100,000 tokens and writing 10,000 costs $1.20.
PRICE = {"input": 10.0, "output": 20.0, "cache_read": 1.0, "cache_write": 12.5}
CALL = Usage(input_tokens=100_000, output_tokens=10_000)
CALL_USD = 1.20


def model(request: Request) -> Response:
    return text_reply("answer to " + request.messages[-1].text, usage=CALL)


def write_config(tmp: Path, budget: dict[str, Any], **more: Any) -> Config:
    path = tmp / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp / "s.db")},
                "prices": {"function": PRICE},
                "cron": {"timezone": "UTC"},
                "agent": {
                    "workspace": str(tmp / "ws"),
                    "budget": budget,
                    "approver": {"owners": ["memory:owner"]},
                },
                **more,
            }
        )
    )
    return load_config(str(path), {"HOME": str(tmp)})


class Chat:
    def __init__(self, transport: MemoryTransport, provider: FunctionProvider) -> None:
        self.transport = transport
        self.provider = provider
        self.said = 0

    async def say(self, text: str, sender: str = "alice") -> str:
        before = len([m for m in self.transport.sent if m.chat_id == sender])
        self.said += 1
        await self.transport.inject(
            text, sender_id=sender, chat_id=sender, message_id=f"{text}#{self.said}"
        )
        with anyio.fail_after(20):
            while len(mine := [m for m in self.transport.sent if m.chat_id == sender]) <= before:
                await anyio.sleep(0.01)
        return mine[before].text

    def to(self, chat: str) -> list[str]:
        return [m.text for m in self.transport.sent if m.chat_id == chat]


@asynccontextmanager
async def daemon(config: Config) -> AsyncIterator[Chat]:
    from rousseau.daemon import Daemon

    transport = MemoryTransport()
    provider = FunctionProvider(model)
    running = Daemon(
        config,
        transports={"memory": transport},
        chat_policies={"memory": ChatPolicy(allowlist=frozenset({"alice", "bob", "owner"}))},
        provider=provider,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(running.run)
        with anyio.fail_after(20):
            while not transport.connected:
                await anyio.sleep(0.02)
        yield Chat(transport, provider)
        running.stop()


def test_prices_know_the_common_models_by_any_of_their_names() -> None:
    prices = Prices()
    for name in (
        "claude-sonnet-4-5",
        "anthropic/claude-sonnet-4.5",  # OpenRouter
        "anthropic.claude-sonnet-4-5-20250929-v1:0",  # Bedrock
        "claude-sonnet-4-5@20250929",  # Vertex
    ):
        assert prices.of(name).input == 3.0, name
    assert prices.of("gpt-4o-mini").output == 0.60
    million_cached = Usage(cache_read_tokens=MILLION, cache_write_tokens=MILLION)
    assert prices.cost("claude-sonnet-4-5", million_cached) == pytest.approx(0.30 + 3.75)
    assert Prices().of("my-own-model") is FREE  # unknown: zero, and a warning


async def test_a_daily_budget_stops_model_calls_once_passed_and_tells_the_owner(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"daily_usd": 3.0})
    async with daemon(config) as chat:
        for n in range(3):  # $1.20, $2.40, $3.60: the third call passes the limit
            assert await chat.say(f"q{n}") == f"answer to q{n}"
        assert await chat.say("q3") == BUDGET_REPLY
        assert await chat.say("q4", sender="bob") == BUDGET_REPLY
        assert len(chat.provider.requests) == 3  # nothing more reached the model
        with anyio.fail_after(10):
            while not chat.to("owner"):
                await anyio.sleep(0.02)
        usage = await chat.say("/usage")
        await anyio.sleep(0.2)
        notices = chat.to("owner")
    assert len(notices) == 1  # once a day, not once per refused message
    assert "Budget reached for agent default" in notices[0] and "$3.60" in notices[0]
    assert "today: $3.60 (330,000 tokens, 3 model calls)" in usage  # /usage still works
    assert "You:" in usage and "Limits: $3.00 a day." in usage


async def test_a_per_person_limit_stops_one_person_and_not_another(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"per_sender_daily_usd": 2.0})
    async with daemon(config) as chat:
        assert await chat.say("a1") == "answer to a1"
        assert await chat.say("a2") == "answer to a2"  # $2.40 for alice
        assert await chat.say("a3") == SENDER_BUDGET_REPLY
        assert await chat.say("b1", sender="bob") == "answer to b1"
        alice = await chat.say("/usage")
        bob = await chat.say("/usage", sender="bob")
        await anyio.sleep(0.2)
        owner = chat.to("owner")
    assert owner == []  # one person's limit is theirs: the owner is not woken for it
    assert "You:\n  today: $2.40" in alice and "You:\n  today: $1.20" in bob
    assert "Agent default:\n  today: $3.60" in bob


async def test_a_token_limit_and_a_monthly_limit_hold_too(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"daily_tokens": 200_000})
    async with daemon(config) as chat:
        assert await chat.say("t1") == "answer to t1"
        assert await chat.say("t2") == "answer to t2"  # 220,000 tokens
        assert await chat.say("t3") == BUDGET_REPLY
    (tmp_path / "m").mkdir()
    config = write_config(tmp_path / "m", {"monthly_usd": 1.0})
    async with daemon(config) as chat:
        assert await chat.say("m1") == "answer to m1"
        assert await chat.say("m2") == BUDGET_REPLY


def test_rousseau_usage_shows_the_dollars(tmp_path: Path) -> None:
    import subprocess

    config = write_config(tmp_path, {"daily_usd": 10.0})

    async def talk() -> None:
        async with daemon(config) as chat:
            await chat.say("one")
            await chat.say("two", sender="bob")

    anyio.run(talk)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = [*ROUSSEAU, "--config", str(tmp_path / "config.yaml"), "usage"]
    shown = subprocess.run(run, capture_output=True, text=True, env=env, check=True)
    out = shown.stdout
    assert "agent default" in out and "$2.40 (220,000 tokens, 2 model calls)" in out
    assert "daily limit: $10.00, $7.60 left" in out
    assert "memory:alice: $1.20 ($1.20)" in out and "memory:bob: $1.20" in out
    as_json = subprocess.run(
        [*run, "--json"], capture_output=True, text=True, env=env, check=True
    )
    month = json.loads(as_json.stdout)["month"]
    total = next(r for r in month if r["person"] == "*")
    assert (total["usd"], total["tokens"], total["calls"]) == (2.4, 220_000, 2)
