"""Updates delivered again after a kill -9 (same update_id, same message_id) are dropped as
duplicates: not answered again, and not charged to the sender's rate limit."""

from __future__ import annotations

import signal

import pytest

from tests.faults.support import (
    EchoModel,
    RecordingTelegram,
    acknowledged,
    edit_config,
    log_events,
    replies_recorded,
    wait_until,
)
from tests.test_daemon import Daemon

SENDER = 42
ANSWERED = 50


@pytest.mark.timeout(90)
def test_redelivered_updates_cost_no_reply_and_no_rate_limit(
    daemon: Daemon, telegram: RecordingTelegram, echo: EchoModel
) -> None:
    # The first run lets 50 messages in one go through; the second runs on the default
    # ratelimit (20/1m), which 50 duplicates would exhaust if they were counted.
    edit_config(daemon, lambda c: c.update(ratelimit={"default": "1000/1m"}))
    daemon.start()
    updates = [
        telegram.push(f"m{n}", chat_id=SENDER, user_id=SENDER) for n in range(1, ANSWERED + 1)
    ]
    # Answered, recorded as sent and acknowledged, so the kill below cuts nothing short.
    settled = wait_until(
        lambda: (
            replies_recorded(daemon) >= ANSWERED
            and acknowledged(telegram, int(updates[-1]["update_id"]))
        ),
        timeout=40,
    )
    first = [s.text for s in telegram.sent]
    assert first == [f"echo: m{n}" for n in range(1, ANSWERED + 1)], first
    assert settled, f"{replies_recorded(daemon)} replies recorded as sent, or not acknowledged"
    daemon.stop(signal.SIGKILL, timeout=10)

    edit_config(daemon, lambda c: c.pop("ratelimit"))
    since = len(telegram.polls)  # calls of the killed daemon's last poll come before this
    daemon.start()
    for update in updates:
        telegram.deliver(update)
    new = telegram.push(f"m{ANSWERED + 1}", chat_id=SENDER, user_id=SENDER)
    wait_until(
        lambda: len(telegram.sent) > ANSWERED and acknowledged(telegram, int(new["update_id"])),
        timeout=20,
    )
    # SIGTERM delivers what is queued and exits; after that nothing more can be sent.
    exit_code = daemon.stop(signal.SIGTERM, timeout=30)

    duplicates = [int(u["update_id"]) for u in updates]
    assert telegram.received(duplicates, since), "the restarted daemon never got the duplicates"
    after = [s.text for s in telegram.sent[ANSWERED:]]
    events = log_events(daemon, "router.duplicate", "router.rate_limited")
    assert after == [f"echo: m{ANSWERED + 1}"], f"after the redelivery: {after}; log: {events}"
    asked = echo.produced[ANSWERED:]
    assert asked == [f"echo: m{ANSWERED + 1}"], f"the model answered after the restart: {asked}"
    assert exit_code == 0
