"""Secrets never reach a log line."""

from __future__ import annotations

import json

import pytest
import structlog

from rousseau.log import MASK, Redactor, configure_logging


def test_redactor_masks_configured_secrets_and_token_shapes() -> None:
    redact = Redactor(["hunter2-very-secret"])
    event = redact(
        None,
        "info",
        {
            "event": "x",
            "detail": "login with hunter2-very-secret failed",
            "nested": {"list": ["sk-abcdefghijklmnopqrstuvwxyz", "ok"]},
            "telegram": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawXYZ",
            "slack": "xoxb-1234567890-abcdefghij",
            "error": RuntimeError("bad key hunter2-very-secret"),
            "count": 3,
        },
    )
    text = json.dumps(event)
    assert "hunter2" not in text and "sk-abc" not in text
    assert "AAHdqT" not in text and "xoxb-" not in text
    assert event["nested"]["list"][1] == "ok" and event["count"] == 3
    assert text.count(MASK) == 5


def test_configured_logging_writes_redacted_json(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", secrets=["sk-live-0123456789"])
    structlog.get_logger("t").info("provider.called", key="sk-live-0123456789", n=1)
    structlog.get_logger("t").debug("hidden.below_level")
    line = capsys.readouterr().err.strip()
    record = json.loads(line)
    assert record["event"] == "provider.called" and record["key"] == MASK
    assert record["level"] == "info" and "timestamp" in record


def test_what_libraries_log_is_masked_and_formatted_as_the_daemons_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    configure_logging("info", "json", secrets=["bot-token-0123456789"])
    try:
        sdk = logging.getLogger("discord.client")
        sdk.info("chatter below warning is left out")
        try:
            raise RuntimeError("gateway said no to bot-token-0123456789")
        except RuntimeError:
            sdk.exception("Ignoring exception in %s", "on_message")
        record = json.loads(capsys.readouterr().err.strip())
    finally:
        for handler in logging.getLogger().handlers[:]:
            if handler.get_name() == "rousseau.libraries":
                logging.getLogger().removeHandler(handler)
    assert record["event"] == "Ignoring exception in on_message"
    assert record["logger"] == "discord.client" and record["level"] == "error"
    assert "RuntimeError" in record["exception"] and "bot-token" not in record["exception"]
    assert "timestamp" in record


def test_text_logs_show_durations_and_times_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import datetime

    configure_logging("info", "text")
    at = datetime(2026, 11, 30, 20, 29, 25).timestamp()
    structlog.get_logger("t").info("cron.fired", late=13.14, scheduled=at, delay=0.25, count=3)
    line = capsys.readouterr().err
    assert "late=13.1s" in line and "delay=250ms" in line and "count=3" in line
    assert "scheduled=2026-11-30T20:29:25" in line


def test_durations_read_at_a_glance() -> None:
    from rousseau.log import duration

    assert [duration(s) for s in (0.004, 13.14, 245, 7800)] == ["4ms", "13.1s", "4m05s", "2h10m"]
