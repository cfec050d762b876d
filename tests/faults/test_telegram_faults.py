"""Faults on the real python-telegram-bot path against the fake Bot API: an update the SDK
cannot parse, and a chat in a long flood wait while another chat is answered."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.transports.telegram import TelegramTransport
from tests.fakes.telegram import FakeTelegram
from tests.helpers import config_in, serving

pytestmark = pytest.mark.anyio


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


@asynccontextmanager
async def daemon(tmp: Path) -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram().start()
    config = config_in(tmp, ROUSSEAU_SHUTDOWN_GRACE="1s")
    transport = TelegramTransport(fake.token, base_url=fake.url, poll_timeout=1)
    try:
        async with serving(transport, config, FunctionProvider(echo), ["42", "43"]):
            yield fake
    finally:
        fake.stop()


async def sent(fake: FakeTelegram, count: int) -> list[str]:
    with anyio.fail_after(20):
        while len(fake.sent) < count:
            await anyio.sleep(0.02)
    return [s.text for s in fake.sent]


async def test_an_update_the_sdk_cannot_parse_is_skipped(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with daemon(tmp_path) as fake:
            fake.deliver(
                {
                    "update_id": 5000,
                    "message": {"message_id": 1, "date": "not a date", "chat": "not a chat"},
                }
            )
            fake.push("and this one?", update_id=5001)
            assert await sent(fake, 1) == ["echo: and this one?"]
            with anyio.fail_after(20):
                while max(fake.offsets, default=0) < 5002:  # both taken in
                    await anyio.sleep(0.02)
    assert [e["update"] for e in logs if e["event"] == "telegram.bad_update"] == [5000]
    assert not [e for e in logs if e["event"] == "transport.failed"]
    assert fake.offsets and max(fake.offsets) >= 5002  # both acknowledged


async def test_a_chat_in_flood_wait_holds_up_no_other_chat(tmp_path: Path) -> None:
    async with daemon(tmp_path) as fake:
        fake.flood_chats[42] = 30  # Telegram: retry after 30 s, for this chat only
        fake.push("first", chat_id=42, user_id=42)
        with anyio.fail_after(20):
            while 42 not in fake.flood_until:  # its reply has met the flood wait
                await anyio.sleep(0.02)
        fake.push("second", chat_id=43, user_id=43)
        assert await sent(fake, 1) == ["echo: second"]
        assert fake.flood_until[42] > time.monotonic(), "chat 42 is still waiting"
