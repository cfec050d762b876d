"""Fixtures of the fault tests: the fake Bot API, the echoing model, and one `rousseau run`
subprocess (config and state in the test's tmp_path) that is always killed at the end."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.faults.support import EchoModel, RecordingTelegram
from tests.test_daemon import Daemon


@pytest.fixture
def telegram() -> Iterator[RecordingTelegram]:
    fake = RecordingTelegram()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def echo(fake_llm: FakeLLMServer) -> EchoModel:
    model = EchoModel()
    fake_llm.responder = model
    return model


@pytest.fixture
def daemon(
    tmp_path: Path, telegram: FakeTelegram, fake_llm: FakeLLMServer, echo: EchoModel
) -> Iterator[Daemon]:
    """One daemon's config and state, started and killed as often as a test likes; whatever
    process is left is killed at the end, passed or failed."""
    d = Daemon(tmp_path, telegram, fake_llm)
    try:
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=10)
