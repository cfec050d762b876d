"""What signal-cli prints is handed over chat by chat: each chat in order, the chats side by
side, so one slow chat holds up no other (against the fake signal-cli)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from rousseau.transports.base import Inbound
from tests.transports.harness_signal import SignalHarness

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def running(
    harness: SignalHarness, handler: Callable[[Inbound], Awaitable[None]]
) -> AsyncIterator[None]:
    transport = harness.transport()
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(transport.run, handler)
                yield
                await transport.stop()
    finally:
        await transport.aclose()


async def test_two_chats_are_taken_side_by_side() -> None:
    harness = SignalHarness()
    chats = (harness.dm_chat, harness.group_chat)
    arrived = {chat: anyio.Event() for chat in chats}
    taken: list[str] = []

    async def both_at_once(inbound: Inbound) -> None:
        arrived[inbound.chat_id].set()
        with anyio.fail_after(10):  # one chat after the other never gets past this
            for event in arrived.values():
                await event.wait()
        taken.append(inbound.chat_id)

    async with running(harness, both_at_once):
        await anyio.to_thread.run_sync(harness.dm, "one")
        await anyio.to_thread.run_sync(lambda: harness.group("two", mentioned=True))
        while len(taken) < 2:
            await anyio.sleep(0.05)
    assert sorted(taken) == sorted(chats)


async def test_each_chat_stays_in_order_while_another_is_slow() -> None:
    harness = SignalHarness()
    release = anyio.Event()
    taken: list[str] = []

    async def group_is_slow(inbound: Inbound) -> None:
        if inbound.is_group:
            with anyio.fail_after(10):
                await release.wait()
        taken.append(inbound.text)

    async with running(harness, group_is_slow):
        await anyio.to_thread.run_sync(lambda: harness.group("slow", mentioned=True))
        for text in ("1", "2", "3"):
            await anyio.to_thread.run_sync(harness.dm, text)
        while len(taken) < 3:
            await anyio.sleep(0.05)
        assert taken == ["1", "2", "3"], "the direct chat was answered in order meanwhile"
        release.set()
        while len(taken) < 4:
            await anyio.sleep(0.05)
    assert taken[-1].endswith("slow")
