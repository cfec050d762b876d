"""Alerts on another channel (`rousseau run` as a subprocess): when Slack goes down the owner
hears it on Telegram once, within `alerts.after` and a few seconds, and again when it is
back; a connection that flaps says nothing more; turns that all fail are told; and the
alert logic's own limits (never through the transport it is about, at most MAX_PER_HOUR
an hour) hold."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rousseau.alerts import MAX_PER_HOUR, Alerts
from rousseau.config import load_config
from rousseau.metrics import Metrics
from tests.fakes.llm import FakeLLMServer
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.test_daemon import Daemon, model


@pytest.fixture
def llm(fake_llm: FakeLLMServer) -> FakeLLMServer:
    fake_llm.responder = model
    return fake_llm


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def told(telegram: FakeTelegram) -> list[str]:
    return [s.text for s in telegram.sent if s.chat_id == 42]


def until(check: Any, seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.05)


def test_slack_down_is_told_on_telegram_once_and_its_return_too(
    tmp_path: Path, telegram: FakeTelegram, slack: FakeSlack, llm: FakeLLMServer
) -> None:
    daemon = Daemon(tmp_path, telegram, llm)
    data = json.loads(daemon.config.read_text())
    data["slack"] = {
        "app_token": slack.app_token,
        "bot_token": slack.bot_token,
        "base_url": slack.url + "/api/",
        "allowlist": ["U0OWNER"],
    }
    data["alerts"] = {"deliver_to": ["telegram:42", "slack:D0OWNER"], "after": "2s"}
    daemon.config.write_text(json.dumps(data))
    daemon.start()
    try:
        slack.wait_connections(1)
        slack.go_down()
        down_at = time.monotonic()
        until(lambda: any("slack has been down" in t for t in told(telegram)), 20, daemon.log)
        assert time.monotonic() - down_at < 2 + 8  # `after`, and a few seconds
        slack.down = False
        until(lambda: any("slack is back" in t for t in told(telegram)), 60, daemon.log)
        for _ in range(3):  # flapping: down for less than `after` each time
            slack.wait_connections(slack.connections)
            slack.go_down()
            time.sleep(0.5)
            slack.down = False
            time.sleep(1.0)
        time.sleep(4)
        alerts = [t for t in told(telegram) if "slack" in t]
        assert len(alerts) == 2, alerts  # one down, one back: no storm
        assert not [p for p in slack.posted if "slack has been down" in p.text]  # not through it
        assert daemon.stop() == 0
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


@pytest.mark.anyio
async def test_failing_turns_are_told_and_the_hour_is_capped(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "alerts:\n  deliver_to: ['telegram:42', 'slack:D1']\n  after: 0s\n"
    )
    config = load_config(str(tmp_path / "config.yaml"), {"HOME": str(tmp_path)})
    sent: list[tuple[str, str, str]] = []

    async def notify(transport: str, chat: str, text: str) -> None:
        sent.append((transport, chat, text))

    metrics = Metrics()
    states: dict[str, dict[str, Any]] = {"slack": {"connected": True}}
    alerts = Alerts(
        config=lambda: config,
        notify=notify,
        states=lambda: states,
        connected=lambda name: name == "telegram",
        metrics=metrics,
    )
    for _ in range(3):  # three turns, all failed
        metrics.turn_seconds.observe(0.1)
        metrics.errors.labels("telegram").inc()
        await alerts.look()
    assert [s[:2] for s in sent] == [("telegram", "42")]  # the connected chat only
    assert "The last 3 turns all failed" in sent[0][2]
    metrics.turn_seconds.observe(0.1)  # one answered
    await alerts.look()
    assert sent[-1][2] == "✅ Model calls succeed again."
    sent.clear()
    for n in range(10):  # slack flapping past `after` (0s) at every look
        states["slack"] = {"connected": n % 2 == 1}
        await alerts.look()
    told = [t for _, _, t in sent if "slack" in t]
    assert len(sent) == 2 and len(told) == 2  # once each: quiet after that
    assert told[0].startswith("⚠️ slack has been down for ") and "(not connected)" in told[0]
    assert told[1].startswith("✅ slack is back (it was down for ")
    assert all(transport != "slack" for transport, _, _ in sent)  # never through slack
    sent.clear()
    states.update({f"t{n}": {"connected": False} for n in range(MAX_PER_HOUR + 10)})
    await alerts.look()
    assert len(sent) == MAX_PER_HOUR - 4  # the hour spent: four went before (two pairs)
