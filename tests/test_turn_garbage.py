"""What a turn makes is freed when the turn ends, not left in reference cycles for the
garbage collector: under load, a cycle per turn let the heap swell by megabytes between
collections, and gave the collector work."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.transports.telegram import TelegramTransport
from tests.fakes.telegram import FakeTelegram
from tests.helpers import config_in, serving

pytestmark = pytest.mark.anyio

TURN_OBJECTS = {"Preview", "_Later", "Inbound", "OutgoingFiles", "TaskGroup", "CancelScope"}


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


async def answered(fake: FakeTelegram, count: int) -> None:
    with anyio.fail_after(20):
        while len(fake.sent) < count:
            await anyio.sleep(0.02)


async def test_streamed_turns_leave_nothing_for_the_garbage_collector(
    tmp_path: Path, telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quick turns, as under load: no typing task is started and cancelled (a cancelled task
    # leaves a young exception cycle, which the collector's first generation frees at once),
    # even if this machine stalls for a moment.
    monkeypatch.setattr("rousseau.router.turns.TYPING_AFTER", 60.0)
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), ["42"]):
        telegram.push("warm up")
        await answered(telegram, 1)
        gc.collect()
        gc.disable()
        try:
            for i in range(5):
                telegram.push(f"message {i}")
            await answered(telegram, 6)
            await anyio.sleep(0.3)  # the turns' tasks have ended
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = Counter(type(o).__qualname__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert telegram.sent[-1].text == "echo: message 4"
    assert {name: n for name, n in left.items() if name in TURN_OBJECTS} == {}
