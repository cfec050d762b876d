"""What signal-cli prints is handed over chat by chat: each chat in order, the chats side by
side, so one slow chat holds up no other (against the fake signal-cli)."""

from __future__ import annotations

import anyio
import pytest

from rousseau.messages import Inbound
from tests.helpers import SideBySide, running_transport, until
from tests.transports.harness_signal import SignalHarness

pytestmark = pytest.mark.anyio


async def test_two_chats_are_taken_side_by_side() -> None:
    harness = SignalHarness()
    both = SideBySide((harness.dm_chat, harness.group_chat))
    async with running_transport(harness.transport(), both):
        await anyio.to_thread.run_sync(harness.dm, "one")
        await anyio.to_thread.run_sync(lambda: harness.group("two", mentioned=True))
        await until(lambda: len(both.taken) == 2)
    assert sorted(both.taken) == sorted((harness.dm_chat, harness.group_chat))


async def test_each_chat_stays_in_order_while_another_is_slow() -> None:
    harness = SignalHarness()
    release = anyio.Event()
    taken: list[str] = []

    async def group_is_slow(inbound: Inbound) -> None:
        if inbound.is_group:
            with anyio.fail_after(10):
                await release.wait()
        taken.append(inbound.text)

    async with running_transport(harness.transport(), group_is_slow):
        await anyio.to_thread.run_sync(lambda: harness.group("slow", mentioned=True))
        for text in ("1", "2", "3"):
            await anyio.to_thread.run_sync(harness.dm, text)
        await until(lambda: len(taken) == 3)
        assert taken == ["1", "2", "3"], "the direct chat was answered in order meanwhile"
        release.set()
        await until(lambda: len(taken) == 4)
    assert taken[-1].endswith("slow")
