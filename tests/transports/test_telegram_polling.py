"""The updates of one poll, on the real python-telegram-bot path against the fake Bot API:
the chats are taken side by side (their messages persisted together), each chat's in order,
and a failed update comes back, with no later update of its chat taken before it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from rousseau.messages import Inbound
from rousseau.transports.telegram import TelegramTransport
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def polling(
    telegram: FakeTelegram, handler: Callable[[Inbound], Awaitable[None]]
) -> AsyncIterator[None]:
    """The transport polling with `handler`, restarted after a handler's failure as the
    daemon's supervisor restarts it."""
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)

    async def run() -> None:
        while True:
            try:
                await transport.run(handler)
            except Exception:
                await anyio.sleep(0.05)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            yield
            await transport.stop()
            tg.cancel_scope.cancel()
    finally:
        await transport.aclose()


async def test_the_chats_of_one_poll_are_taken_side_by_side(telegram: FakeTelegram) -> None:
    # Queued before the first poll: both come in one batch.
    telegram.push("from 42", chat_id=42, user_id=42)
    telegram.push("from 43", chat_id=43, user_id=43)
    arrived = {"42": anyio.Event(), "43": anyio.Event()}
    taken: list[str] = []

    async def handler(inbound: Inbound) -> None:
        arrived[inbound.chat_id].set()
        # Chat 42's message is persisted only once chat 43's has reached the handler too:
        # one after another, this waits forever.
        await arrived["43"].wait()
        taken.append(inbound.text)

    async with polling(telegram, handler):
        with anyio.fail_after(10):
            while len(taken) < 2 or len(telegram.offsets) < 2:  # and the next poll was asked
                await anyio.sleep(0.02)
    assert sorted(taken) == ["from 42", "from 43"]
    # The next poll acknowledged both updates at once.
    assert len(telegram.offsets) >= 2 and telegram.offsets[1] > max(telegram.offsets[0], 1)


async def test_each_chat_of_a_poll_is_taken_in_order(telegram: FakeTelegram) -> None:
    for i in range(3):
        telegram.push(f"42 #{i}", chat_id=42, user_id=42)
        telegram.push(f"43 #{i}", chat_id=43, user_id=43)
    taken: list[str] = []
    others = anyio.Event()

    async def handler(inbound: Inbound) -> None:
        if inbound.text == "42 #0":  # slow to persist: nothing of its chat overtakes it
            with anyio.move_on_after(5):  # (chat 43, taking its turn, is not held up)
                await others.wait()
        taken.append(inbound.text)
        if inbound.text == "43 #2":
            others.set()

    async with polling(telegram, handler):
        with anyio.fail_after(10):
            while len(taken) < 6:
                await anyio.sleep(0.02)
    assert [t for t in taken if t.startswith("42")] == ["42 #0", "42 #1", "42 #2"]
    assert [t for t in taken if t.startswith("43")] == ["43 #0", "43 #1", "43 #2"]
    assert taken.index("43 #2") < taken.index("42 #0"), "chat 43 did not wait for chat 42"


async def test_a_failed_update_comes_back_before_its_chat_goes_on(telegram: FakeTelegram) -> None:
    telegram.push("42 first", chat_id=42, user_id=42)
    telegram.push("43 only", chat_id=43, user_id=43)
    telegram.push("42 second", chat_id=42, user_id=42)
    seen: list[str] = []
    failures = 1

    async def handler(inbound: Inbound) -> None:
        nonlocal failures
        seen.append(inbound.text)
        if inbound.text == "42 first" and failures:
            failures -= 1
            raise OSError("the store could not persist it")

    async with polling(telegram, handler):
        with anyio.fail_after(10):
            while "42 second" not in seen:
                await anyio.sleep(0.02)
    # The failed update held the offset: it came back, and its chat's next update waited
    # for it. The other chat's update was taken in the first poll and came back too, as a
    # duplicate (the daemon's inbox drops those).
    assert seen.index("42 first") < seen.index("43 only")
    assert seen.count("42 first") == 2
    assert seen.index("42 second") > [i for i, t in enumerate(seen) if t == "42 first"][1]
    assert "43 only" in seen[:3]
