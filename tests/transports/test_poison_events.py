"""One malformed platform event never stops a transport nor holds up another chat: the
adapter records it as failed (its reason logged, `rousseau_failed_inbound` counted) and
skips it at once, and the next message, from another chat, is answered without a restart.

Each runs the real SDK against its platform's fake; a text that is readable once its lone
surrogates are replaced is answered, not refused."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau import web
from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.daemon import Daemon
from rousseau.messages import Inbound
from rousseau.transports.base import Transport
from rousseau.transports.telegram import TelegramTransport, Webhook
from tests.fakes.discord import OWNER_ID
from tests.fakes.telegram import FakeTelegram
from tests.helpers import config_in, free_port, serving
from tests.transports.harness_discord import DiscordHarness

pytestmark = pytest.mark.anyio

Logs = list[dict[str, Any]]


def short_echo(request: Request) -> Response:
    """The start of what was said: a 100,000-character question gets a one-line answer."""
    return text_reply("echo: " + request.messages[-1].text[:40])


@asynccontextmanager
async def daemon(
    transport: Transport, tmp: Path, allowed: list[str]
) -> AsyncIterator[tuple[Daemon, FunctionProvider]]:
    provider = FunctionProvider(short_echo)
    config = config_in(tmp, ROUSSEAU_SHUTDOWN_GRACE="1s")
    async with serving(transport, config, provider, allowed) as d:
        yield d, provider


def failed_inbound(d: Daemon, transport: str) -> float:
    counted = d.metrics.registry.get_sample_value(
        "rousseau_failed_inbound_total", {"transport": transport}
    )
    return counted or 0.0


def restarts(logs: Logs) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] in ("transport.failed", "transport.restart")]


async def until(done: Callable[[], bool], within: float = 30) -> None:
    with anyio.fail_after(within):
        while not done():
            await anyio.sleep(0.02)


# -- Telegram ------------------------------------------------------------------------------


def spoil(update: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    spoiled = copy.deepcopy(update)
    where = spoiled
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return spoiled


TELEGRAM_POISONS = {
    "chat id a string": (("message", "chat", "id"), "not-a-chat"),
    "sender id a string": (("message", "from", "id"), "someone"),
    "text a number": (("message", "text"), 12345),
    "text an object": (("message", "text"), {"nested": ["junk", 1]}),
    "entities junk": (("message", "entities"), [{"type": "mention", "offset": "x"}]),
}


@pytest.mark.parametrize("poison", sorted(TELEGRAM_POISONS))
async def test_a_poison_update_is_skipped_at_once_and_the_next_chat_answered(
    tmp_path: Path, telegram: FakeTelegram, poison: str
) -> None:
    path, value = TELEGRAM_POISONS[poison]
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)
    with capture_logs() as logs:
        async with daemon(transport, tmp_path, ["42", "43"]) as (d, _):
            bad = spoil(telegram.update("poison", update_id=5000), path, value)
            telegram.deliver(bad)
            telegram.push("and this one?", chat_id=43, user_id=43, update_id=5001)
            await until(lambda: [s.text for s in telegram.sent] == ["echo: and this one?"])
            await until(lambda: max(telegram.offsets, default=0) >= 5002)  # both acknowledged
            counted = failed_inbound(d, "telegram")
    recorded = [e for e in logs if e["event"] == "telegram.bad_update"]
    assert [e["update"] for e in recorded] == [5000]
    assert recorded[0]["reason"]
    assert not restarts(logs), restarts(logs)
    assert counted == 1


async def test_a_lone_surrogate_in_a_long_text_is_replaced_and_answered(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)
    long = "x" * 100_000 + "\ud800 end"
    with capture_logs() as logs:
        async with daemon(transport, tmp_path, ["42", "43"]) as (d, provider):
            telegram.deliver(spoil(telegram.update("", update_id=6000), ("message", "text"), long))
            telegram.push("and this one?", chat_id=43, user_id=43, update_id=6001)
            await until(lambda: len(telegram.sent) == 2)
            counted = failed_inbound(d, "telegram")
    asked = sorted(r.messages[-1].text for r in provider.requests)
    assert asked == ["and this one?", "x" * 100_000 + "\ufffd end"]
    assert not restarts(logs), restarts(logs)
    assert not [e for e in logs if e["event"] == "telegram.bad_update"]
    assert counted == 0


async def test_a_posted_poison_update_is_answered_200_and_recorded(
    telegram: FakeTelegram,
) -> None:
    port = free_port()
    telegram.balance = [f"http://127.0.0.1:{port}/hook"]
    transport = TelegramTransport(
        telegram.token,
        base_url=telegram.url,
        webhook=Webhook(url="https://bot.example.org/hook", listen=f"127.0.0.1:{port}"),
    )
    taken: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        taken.append(inbound)

    assert transport.posts is not None
    listener = await web.listen(f"127.0.0.1:{port}", "telegram.webhook")
    with capture_logs() as logs:
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(web.serve_posts, [transport.posts], listener)  # as the daemon does
            await tg.start(transport.run, handler)
            for n, (path, value) in enumerate(TELEGRAM_POISONS.values()):
                telegram.deliver(spoil(telegram.update("poison", update_id=7000 + n), path, value))
            telegram.push("and this one?", chat_id=43, user_id=43, update_id=7100)
            await until(lambda: not telegram.updates)  # every post was answered 200
            await transport.stop()
            tg.cancel_scope.cancel()
    await transport.aclose()
    assert [i.text for i in taken] == ["and this one?"]
    recorded = [e for e in logs if e["event"] == "telegram.bad_update"]
    assert sorted(e["update"] for e in recorded) == list(range(7000, 7000 + len(TELEGRAM_POISONS)))
    assert all(e["reason"] for e in recorded)


# -- Discord -------------------------------------------------------------------------------


def discord_poisons(harness: DiscordHarness) -> dict[str, dict[str, Any]]:
    """Malformed MESSAGE_CREATE events, each spoiling one field of a valid mention."""
    fake = harness.fake

    def spoiled(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        data = fake.message_data("poison", mention_bot=True)
        change(data)
        return data

    return {
        "content a number": spoiled(lambda d: d.update(content=42)),
        "content an object": spoiled(lambda d: d.update(content={"a": [1]})),
        "content missing": spoiled(lambda d: d.pop("content")),
        "id not a snowflake": spoiled(lambda d: d.update(id="not-a-snowflake")),
        "channel id not a snowflake": spoiled(lambda d: d.update(channel_id="general")),
        "channel id missing": spoiled(lambda d: d.pop("channel_id")),
        "author missing": spoiled(lambda d: d.pop("author")),
        "author id junk": spoiled(lambda d: d["author"].update(id=["x"])),
        "author name a number": spoiled(lambda d: d["author"].update(global_name=5, username=5)),
        "mentions not a list": spoiled(lambda d: d.update(mentions="everyone")),
        "attachments junk": spoiled(lambda d: d.update(attachments=[{"id": "x"}])),
        "type a string": spoiled(lambda d: d.update(type="default")),
        "id too large for a date": spoiled(lambda d: d.update(id=str(2**80))),
    }


async def test_malformed_gateway_events_are_skipped_and_the_next_chat_answered(
    tmp_path: Path,
) -> None:
    harness = DiscordHarness()
    poisons = discord_poisons(harness)
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [OWNER_ID]) as (d, _):
                for data in poisons.values():
                    await anyio.to_thread.run_sync(harness.fake.dispatch, "MESSAGE_CREATE", data)
                await anyio.to_thread.run_sync(harness.dm, "and this one?")
                answered = ["echo: and this one?"]
                await until(lambda: [m.text for m in harness.delivered()] == answered)
                counted = failed_inbound(d, "discord")
    finally:
        harness.close()
    recorded = [e for e in logs if e["event"] == "discord.bad_event"]
    assert len(recorded) == len(poisons), [e.get("reason") for e in recorded]
    assert all(e["reason"] for e in recorded)
    assert not restarts(logs), restarts(logs)
    assert harness.fake.identifies == 1  # never reconnected
    assert counted == len(poisons)


async def test_a_lone_surrogate_in_discord_content_is_replaced_and_answered(
    tmp_path: Path,
) -> None:
    harness = DiscordHarness()
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [OWNER_ID]) as (_, provider):
                await anyio.to_thread.run_sync(harness.dm, "half \udc80 a pair")
                await until(lambda: len(harness.delivered()) == 1)
    finally:
        harness.close()
    assert [r.messages[-1].text for r in provider.requests] == ["half \ufffd a pair"]
    assert not restarts(logs), restarts(logs)
