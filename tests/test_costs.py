"""Costs and budgets through the whole daemon: a fake model reporting chosen token counts, the
price table, the limits of agent.budget, /usage, `rousseau usage` and the owners' notice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC
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
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        assert prices.of("my-own-model") is FREE  # unknown: zero...
        assert prices.cost("my-own-model", million_cached) == 0.0
    assert [e["event"] for e in logs] == ["costs.unknown_model"]  # ...said once


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
    as_json = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, check=True)
    month = json.loads(as_json.stdout)["month"]
    total = next(r for r in month if r["person"] == "*")
    assert (total["usd"], total["tokens"], total["calls"]) == (2.4, 220_000, 2)


class Ledger:
    """A meter on a real SQLite store, over its budget from the start when asked."""

    def __init__(self, tmp: Path, **budget: float) -> None:
        from rousseau.config.sections import BudgetConfig
        from rousseau.costs import Meter, Price
        from rousseau.state import Store
        from rousseau.state.sqlite_spending import SqliteSpending

        self.store = Store(tmp / "s.db")
        self.meter = Meter(
            SqliteSpending(self.store),
            prices=Prices({"function": Price.of(**PRICE)}),
            budgets={"default": BudgetConfig(**budget)},
            zone=UTC,
        )

    async def spend(self, usd: float) -> None:
        from rousseau.state.records import Charge

        await self.meter.spending.record(
            Charge(at=0, day=self.meter.today(), agent="default", person="", session_id="s",
                   job="turn", model="function", usd=usd)
        )  # fmt: skip


async def test_cron_stops_over_budget_and_tells_no_failure(tmp_path: Path) -> None:
    from rousseau.agent import Agent, Options
    from rousseau.costs import Metered
    from rousseau.cron import CronRunner
    from rousseau.state.records import CronJob

    ledger = Ledger(tmp_path, daily_usd=1.0)
    await ledger.spend(1.5)
    provider = FunctionProvider(model)
    metered = Metered(provider, ledger.meter, job="cron")
    agent = Agent(metered, options=Options(history=ledger.store))
    told: list[str] = []

    async def notify(transport: str, recipient: str, text: str, *a: Any, **k: Any) -> int:
        told.append(text)
        return 1

    runner = CronRunner(agent=agent, store=ledger.store, notify=notify)
    job = CronJob(
        id=1, name="digest", schedule="@daily", timezone="UTC", prompt="digest", enabled=True,
        deliver_to="telegram:42", misfire="run_once", created_at=0, updated_at=0,
        last_run_at=None, last_status=None, next_run_at=None,
    )  # fmt: skip
    outcome = await runner.run(job)
    ledger.store.close()
    assert outcome.status == "skipped" and "$1.50 spent today of $1.00" in outcome.error
    assert provider.requests == [] and told == []  # no model call, no failure notice


async def test_a_voice_note_is_not_transcribed_over_budget(tmp_path: Path) -> None:
    from rousseau.costs.meter import Budgeted
    from rousseau.media import BlobStore, Incoming, MediaIntake

    heard: list[bytes] = []

    class Ears:
        async def transcribe(self, data: bytes, *, name: str, media_type: str) -> str:
            heard.append(data)
            return "hello there"

    async def fetch(download: Any) -> None:
        await download.write(b"OggS" + bytes(100))

    ledger = Ledger(tmp_path, daily_usd=1.0)
    intake = MediaIntake(
        blobs=BlobStore(folder=tmp_path / "blobs"),
        workspace=tmp_path / "ws",
        transcriber=Budgeted(Ears(), ledger.meter),
    )
    note = Incoming(name="v.ogg", media_type="audio/ogg", size=104, fetch=fetch, voice=True)
    assert (await intake.take([note])).notes == ("[voice note] hello there",)
    await ledger.spend(2.0)
    assert (await intake.take([note])).notes == (
        "[voice note] (not transcribed: the spending limit is reached)",
    )
    ledger.store.close()
    assert len(heard) == 1


def test_each_job_gets_its_own_model_metered_under_its_name(tmp_path: Path) -> None:
    from rousseau.agent import Attachment, Content, Message, Role
    from rousseau.assembly.models import agent_models, model_ref
    from rousseau.costs import Metered
    from rousseau.providers.lazy import LazyProvider

    assert model_ref("openai:gpt-4o-mini", "anthropic") == ("openai", "gpt-4o-mini")
    assert model_ref("llama3:8b", "ollama") == ("ollama", "llama3:8b")  # a tag, not a provider
    path = tmp_path / "config.yaml"
    jobs = {"compaction": "openai:gpt-4o-mini", "vision": "openai:gpt-4o", "cron": "gpt-4o-mini"}
    path.write_text(json.dumps({"openai": {"api_key": "sk-test"}, "agent": {"models": jobs}}))
    config = load_config(str(path), {"HOME": str(tmp_path)})
    ledger = Ledger(tmp_path)  # the meter is not called here
    made: list[Any] = []
    own = FunctionProvider(model)
    models = agent_models(config, own, "openai", meter=ledger.meter, made=made)
    ledger.store.close()
    # one lazy provider per model named (gpt-4o-mini once, for compaction and cron)
    assert len(made) == 2 and all(isinstance(p, LazyProvider) for p in made)
    by_job = {"compaction": models.compaction, "cron": models.cron}
    for job, provider in by_job.items():
        assert isinstance(provider, Metered) and provider.job == job
    assert models.compaction.provider is models.cron.provider  # type: ignore[attr-defined]
    assert isinstance(models.heartbeat, Metered) and models.heartbeat.provider is own
    picture = Attachment(sha256="0" * 64, media_type="image/png", name="p.png", size=1)
    words = Request(session_id="s", system="", messages=[Message.user("hi")])
    looked = Message(
        role=Role.USER, content=[Content.of_text("look"), Content.of_attachment(picture)]
    )
    seen = Request(session_id="s", system="", messages=[looked])
    turn = models.turn
    assert turn._for(words).provider is own  # type: ignore[attr-defined]
    chosen = turn._for(seen)  # type: ignore[attr-defined]
    assert isinstance(chosen, Metered) and chosen.job == "vision"
    assert chosen.provider in made and chosen.provider is not models.cron.provider  # type: ignore[attr-defined]
