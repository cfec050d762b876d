"""Slack: malformed message events and button presses never raise past the adapter and are
recorded when refused; one sent through the fake Socket Mode server is skipped and the next
message answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from structlog.testing import capture_logs

from rousseau.messages import Inbound
from rousseau.transports.slack import SlackTransport
from tests.fuzz.events import FUZZ, held, refusals, spoiled
from tests.transports.harness_slack import SlackHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

BOT = "UBOT"
EVENT: dict[str, Any] = {
    "type": "message",
    "channel": "C0123",
    "channel_type": "channel",
    "user": "U0OWNER",
    "text": f"<@{BOT}> hello",
    "ts": "1700000000.000100",
    "thread_ts": "1700000000.000050",
    "files": [
        {
            "name": "a.png",
            "mimetype": "image/png",
            "size": 12,
            "url_private": "https://files.slack.com/a.png",
        }
    ],
}
PRESS: dict[str, Any] = {
    "type": "block_actions",
    "user": {"id": "U0OWNER"},
    "channel": {"id": "C0123"},
    "container": {"channel_id": "C0123", "thread_ts": "1700000000.000050"},
    "actions": [{"action_id": "rousseau_answer_0", "value": "yes K7QD", "action_ts": "17.5"}],
    "trigger_id": "t1",
}


def adapter() -> SlackTransport:
    made = SlackTransport("xapp-fuzz", "xoxb-fuzz", bot_user_id=BOT)
    made.media = object()  # type: ignore[assignment]  # only whether files are taken in
    return made


@given(spoiled(EVENT))
@example({**EVENT, "subtype": ["unhashable"]})
@example({**EVENT, "ts": "nan"})
@example({**EVENT, "channel": {"id": "C0123"}})
@FUZZ
async def test_a_message_event_is_read_or_refused(event: dict[str, Any]) -> None:
    transport = adapter()
    with capture_logs() as logs:
        read = transport._read(event, mention_event=False)
    held(read[0] if read else None, logs, "slack")


@given(spoiled(PRESS))
@FUZZ
async def test_a_button_press_is_read_or_refused(body: dict[str, Any]) -> None:
    transport = adapter()
    handed: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        handed.append(inbound)

    with capture_logs() as logs:
        await transport._on_button(body, handler)
    held(handed[0] if handed else None, logs, "slack")


async def test_the_valid_event_and_press_are_read() -> None:
    transport = adapter()
    read = transport._read(EVENT, mention_event=False)
    assert read is not None and read[0].text == "hello" and len(read[1]) == 1
    handed: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        handed.append(inbound)

    await transport._on_button(PRESS, handler)
    assert [i.text for i in handed] == ["yes K7QD"]


async def test_a_malformed_event_is_skipped_and_the_next_message_answered(
    tmp_path: Path,
) -> None:
    harness = SlackHarness()
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
                poison = {**EVENT, "channel": harness.dm_chat, "ts": "not a time", "text": "x"}
                await anyio.to_thread.run_sync(harness.fake.send_event, poison)
                await anyio.to_thread.run_sync(harness.dm, "and this one?")
                answered = ["echo: and this one?"]
                await until(lambda: [m.text for m in harness.delivered()] == answered)
                counted = failed_inbound(d, "slack")
    finally:
        harness.close()
    assert [e["reason"] for e in refusals(logs, "slack")]
    assert not restarts(logs)
    assert counted == 1
