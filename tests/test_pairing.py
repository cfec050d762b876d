"""Pairing that cannot be flooded: one code per stranger, its replies rate-limited, room for
a newcomer however many strangers came before, and an owner who can see and reject codes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Options, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.messages import Outbound
from rousseau.policy import PAIRING_REPLIES
from rousseau.router import ChatPolicy, RateLimiter, Router
from rousseau.state import Store
from rousseau.state.daemon_state import MAX_PENDING_CODES, DaemonState
from rousseau.transports.base import MemoryTransport
from tests.helpers import ROUSSEAU, settled

pytestmark = pytest.mark.anyio
PREFIX = "rousseau pair approve "


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


@asynccontextmanager
async def pairing(store: Store) -> AsyncIterator[tuple[Router, MemoryTransport]]:
    transport = MemoryTransport()
    router = Router(
        agent=Agent(FunctionProvider(echo), options=Options(history=store)),
        store=store,
        transports={"memory": transport},
        policies={"memory": ChatPolicy(policy="pairing", allowlist=frozenset({"owner"}))},
        rate_limiter=RateLimiter((1000, 1.0), {}, 100),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        await tg.start(transport.run, router.submit)
        tg.start_soon(router.deliver, "memory")
        with anyio.fail_after(20):
            yield router, transport
        tg.cancel_scope.cancel()


def codes_to(sent: list[Outbound], chat: str) -> list[str]:
    return [s.text.split(PREFIX)[1].split()[0] for s in sent if s.chat_id == chat]


async def settle(router: Router, transport: MemoryTransport, count: int) -> list[Outbound]:
    """All that was sent once the owner's own message, sent last, is answered (and all
    taken in before it, answered and sent)."""
    await transport.inject("ping", sender_id="owner", chat_id="owner")
    sent = await transport.wait_sent(count + 1)
    while not any(s.chat_id == "owner" for s in sent):
        sent = await transport.wait_sent(len(sent) + 1)
    await settled(router)  # anything still on its way
    return [s for s in transport.sent if s.chat_id != "owner"]


async def test_thirty_messages_from_a_stranger_get_one_code() -> None:
    with Store(":memory:") as store:
        async with pairing(store) as (router, t):
            for i in range(30):
                await t.inject(f"hello {i}", sender_id="eve", chat_id="eve")
            sent = await settle(router, t, 1)
            pending = await anyio.to_thread.run_sync(DaemonState(store).pairing_codes_sync)
    assert len(codes_to(sent, "eve")) == 1
    assert [(c.sender_id, c.code) for c in pending] == [("eve", codes_to(sent, "eve")[0])]


async def test_a_later_reply_repeats_the_same_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rousseau.policy.PAIRING_REPLY_EVERY", 0.0)
    with Store(":memory:") as store:
        async with pairing(store) as (router, t):
            await t.inject("hello", sender_id="eve", chat_id="eve")
            await t.wait_sent(1)
            await t.inject("hello?", sender_id="eve", chat_id="eve")
            sent = await settle(router, t, 2)
    first, second = codes_to(sent, "eve")
    assert first == second


async def test_a_flood_of_strangers_cannot_lock_out_a_newcomer() -> None:
    strangers = MAX_PENDING_CODES + 1
    assert MAX_PENDING_CODES >= 20
    with Store(":memory:") as store:
        async with pairing(store) as (router, t):
            with capture_logs() as logs:
                for i in range(strangers):
                    await t.inject("hi", sender_id=f"s{i}", chat_id=f"c{i}")
            sent = await settle(router, t, strangers)
            pending = await anyio.to_thread.run_sync(DaemonState(store).pairing_codes_sync)
    assert all(len(codes_to(sent, f"c{i}")) == 1 for i in range(strangers))
    # the oldest pending code made room for the newcomer
    assert len(pending) == MAX_PENDING_CODES
    assert {c.sender_id for c in pending} == {f"s{i}" for i in range(1, strangers)}
    [full] = [e for e in logs if e["event"] == "router.pairing_full"]
    assert full["evicted"] == "s0"


async def test_a_flood_of_strangers_gets_a_bounded_number_of_replies() -> None:
    limit, _ = PAIRING_REPLIES
    strangers = limit + 20
    with Store(":memory:") as store:
        async with pairing(store) as (router, t):
            with capture_logs() as logs:
                for i in range(strangers):
                    await t.inject("hi", sender_id=f"s{i}", chat_id=f"c{i}")
            sent = await settle(router, t, limit)
    told = [i for i in range(strangers) if codes_to(sent, f"c{i}")]
    assert told == list(range(limit))
    assert len([e for e in logs if e["event"] == "router.pairing_flood"]) == 1


async def test_four_strangers_then_a_fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rousseau.state.daemon_state.MAX_PENDING_CODES", 4)
    with Store(":memory:") as store:
        async with pairing(store) as (router, t):
            for i in range(5):
                await t.inject("hi", sender_id=f"s{i}", chat_id=f"c{i}")
            sent = await settle(router, t, 5)
            state = DaemonState(store)
            pending = await anyio.to_thread.run_sync(state.pairing_codes_sync)
            [fifth] = codes_to(sent, "c4")
            assert await anyio.to_thread.run_sync(state.approve_sync, fifth) is not None
            await t.inject("let me in", sender_id="s4", chat_id="c4")
            with anyio.fail_after(10):
                while not any(s.text == "echo: let me in" for s in t.sent):
                    await t.wait_sent(len(t.sent) + 1)
    assert len(pending) == 4 and "s4" in {c.sender_id for c in pending}


async def test_a_rejected_stranger_gets_no_new_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rousseau.policy.PAIRING_REPLY_EVERY", 0.0)
    with Store(":memory:") as store:
        state = DaemonState(store)
        async with pairing(store) as (router, t):
            await t.inject("hi", sender_id="eve", chat_id="eve")
            [code] = codes_to(await t.wait_sent(1), "eve")
            rejected = await anyio.to_thread.run_sync(state.reject_sync, code.lower())
            assert rejected is not None and rejected.sender_id == "eve"
            assert await anyio.to_thread.run_sync(state.reject_sync, code) is None
            await t.inject("hi again", sender_id="eve", chat_id="eve")
            await t.inject("hi", sender_id="bob", chat_id="bob")
            sent = await settle(router, t, 2)
            pending = await anyio.to_thread.run_sync(state.pairing_codes_sync)
    assert codes_to(sent, "eve") == [code]
    assert [c.sender_id for c in pending] == ["bob"]


async def test_expired_codes_are_replaced() -> None:
    with Store(":memory:") as store:
        state = DaemonState(store)
        first = await state.pairing_code("memory", "eve", "eve", "AAAAAAAA", 0.0)
        second = await state.pairing_code("memory", "eve", "eve", "BBBBBBBB", 3600.0)
        again = await state.pairing_code("memory", "eve", "eve", "CCCCCCCC", 3600.0)
    assert first is not None and first.code == "AAAAAAAA" and first.new
    assert second is not None and second.code == "BBBBBBBB" and second.new
    assert again is not None and again.code == "BBBBBBBB" and not again.new


def test_pair_list_and_reject_on_the_command_line(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ROUSSEAU_STATE_PATH": str(tmp_path / "state.db"),
    }

    async def ask() -> None:
        with Store(tmp_path / "state.db") as store:
            await DaemonState(store).pairing_code("telegram", "666", "666", "K7QDK7QD", 3600.0)

    anyio.run(ask)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ROUSSEAU, "pair", *args], env=env, capture_output=True, text=True, timeout=30
        )

    listed = run("list")
    assert listed.returncode == 0, listed.stderr
    assert "K7QDK7QD" in listed.stdout and "666" in listed.stdout
    rejected = run("reject", "k7qdk7qd")
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.startswith("rejected telegram sender 666")
    again = run("reject", "K7QDK7QD")
    assert again.returncode != 0 and "no such pairing code" in again.stderr
    assert "Traceback" not in again.stderr
    assert "no pairing codes waiting" in run("list").stdout
