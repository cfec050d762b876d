"""The courier: how often it asks the store, and that the outbox gauge still tells the truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau import delivery
from rousseau.delivery import Courier
from rousseau.messages import Outbound
from rousseau.metrics import Metrics
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from rousseau.transports.base import MemoryTransport

pytestmark = pytest.mark.anyio


class CountingState(DaemonState):
    """The store's outbox, counting the courier's rounds (each asks what is due) and how
    often it asks what still waits."""

    rounds = 0
    counted = 0

    async def due(self, transport: str, limit: int = 50, *, skip: Any = ()) -> Any:
        self.rounds += 1
        return await super().due(transport, limit, skip=skip)

    async def waiting(self, transport: str, *, skip: Any = ()) -> tuple[int, float | None]:
        self.counted += 1
        return await super().waiting(transport, skip=skip)


async def test_a_round_that_starts_senders_leaves_the_count_to_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "COUNT_EVERY", 60.0)  # however slow the machine
    store = Store(tmp_path / "s.db")
    state = CountingState(store)
    transport = MemoryTransport("memory")
    metrics = Metrics()
    courier = Courier(transport, state, metrics=metrics)
    # Something waited before: the gauge must come down to nothing once all is sent.
    metrics.outbox_pending.labels("memory").set(5)
    await state.finish(None, [Outbound(transport="memory", chat_id="c", text="part")])
    async with anyio.create_task_group() as tg:
        tg.start_soon(courier.run)
        with anyio.fail_after(10):
            await transport.wait_sent(1)
            # The sender wakes the courier when done: a round with nothing due, which counts.
            while metrics.registry.get_sample_value(
                "rousseau_outbox_pending", {"transport": "memory"}
            ):
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    # The first round found the part and started its sender; only the round after the
    # sender was done asked what still waits.
    assert state.counted == 1
    store.close()


async def resting() -> None:
    """What a courier does while nothing is for it to do: rest. Only time shows that it
    does (nothing happens, and no event says so); one that kept looking would look dozens
    of times in this, and a rest ends after at most 5 s, so the bound is short of that."""
    await anyio.sleep(0.3)


class HeldTransport(MemoryTransport):
    """A platform that takes its time: each send waits until released."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.release = anyio.Event()
        self.sending = anyio.Event()
        """Set when the first send reaches the platform."""

    async def send(self, message: Outbound) -> None:
        self.sending.set()
        await self.release.wait()
        await super().send(message)


async def test_the_courier_rests_while_a_send_is_on_its_way(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    state = CountingState(store)
    transport = HeldTransport()
    courier = Courier(transport, state)
    # Two parts of one chat: the second is due, and waits for the first to go out.
    await state.finish(
        None,
        [Outbound(transport="memory", chat_id="c", text=text) for text in ("one", "two")],
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(courier.run)
        with anyio.fail_after(10):
            await transport.sending.wait()  # the platform is slow to take the first
        # Meanwhile the chat is given a third part, and the courier is told: it looks.
        await state.finish(None, [Outbound(transport="memory", chat_id="c", text="three")])
        courier.wake()
        with anyio.fail_after(10):
            while state.rounds < 2:
                await anyio.sleep(0.01)
        await resting()
        rounds = state.rounds
        transport.release.set()
        with anyio.fail_after(10):
            sent = await transport.wait_sent(3)
        tg.cancel_scope.cancel()
    assert [m.text for m in sent] == ["one", "two", "three"]
    assert rounds <= 3, f"{rounds} looks at the outbox while one send was on its way"
    store.close()


async def test_with_every_place_taken_the_courier_rests_until_one_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "MAX_CHATS", 1)
    store = Store(tmp_path / "s.db")
    state = CountingState(store)
    transport = HeldTransport()
    courier = Courier(transport, state)
    await state.finish(
        None, [Outbound(transport="memory", chat_id=chat, text=chat) for chat in ("a", "b")]
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(courier.run)
        with anyio.fail_after(10):
            await transport.sending.wait()  # chat a holds the only place; b is due, waits
        await resting()
        rounds = state.rounds
        transport.release.set()
        with anyio.fail_after(10):
            sent = await transport.wait_sent(2)
        tg.cancel_scope.cancel()
    assert [m.text for m in sent] == ["a", "b"]
    assert rounds <= 2, f"{rounds} looks at the outbox while no place was free"
    store.close()


async def test_the_courier_rests_while_a_chats_first_part_waits_for_its_retry(
    tmp_path: Path,
) -> None:
    """A part waiting for its retry (a flood wait, say) holds back its chat's later parts;
    the courier rests until the retry is due, where it asked the store again at once."""
    store = Store(tmp_path / "s.db")
    state = CountingState(store)
    transport = MemoryTransport("memory")
    courier = Courier(transport, state)
    await state.finish(
        None,
        [Outbound(transport="memory", chat_id="c", text=text) for text in ("one", "two")],
    )
    first = (await state.due("memory"))[0]
    await state.retry_later(first.id, 60, "429", give_up=False)
    state.rounds = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(courier.run)
        await resting()
        tg.cancel_scope.cancel()
    assert transport.sent == []
    assert state.rounds <= 2, f"{state.rounds} looks at the outbox while nothing could go"
    store.close()


def test_a_throttle_lasts_as_long_as_the_headers_ask() -> None:
    from rousseau.transports.base import Throttled

    assert Throttled.asked({"X-Ogw-Ratelimit-Reset": "3"}, "x-ogw-ratelimit-reset").retry_after == 3
    said = {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT", "X-Ratelimit-Reset": "2"}
    assert Throttled.asked(said, "Retry-After", "X-Ratelimit-Reset").retry_after == 2
    assert Throttled.asked({}, "Retry-After").retry_after == 1.0
    assert Throttled.asked({"retry-after": "-5"}, "Retry-After").retry_after == 0.0
