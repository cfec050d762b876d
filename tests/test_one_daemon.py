"""One daemon per database: a second `rousseau run` on the same state file leaves at once,
naming the first, and nothing is answered twice; `rousseau status` tells who runs."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.faults.support import wait_until
from tests.helpers import ROUSSEAU
from tests.test_daemon import Daemon, llm

__all__ = ["llm"]  # a fixture


def rousseau(daemon: Daemon, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(daemon.config.parent)}
    return subprocess.run(
        [*ROUSSEAU, "--config", str(daemon.config), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_second_daemon_on_one_database_leaves_naming_the_first(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    first = Daemon(tmp_path, telegram, llm).start()
    assert first.proc is not None
    try:
        second = rousseau(first, "run")  # its own health port would be taken too: the lock
        assert second.returncode != 0  # comes first, before anything is opened
        assert f"pid {first.proc.pid}" in second.stderr
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr

        for i in range(5):
            telegram.push(f"m{i}", chat_id=42, user_id=42)
        assert wait_until(lambda: len(telegram.sent) >= 5, timeout=30)
        shown: list[str] = []

        def telegram_up() -> bool:  # published within a couple of seconds of connecting
            status = rousseau(first, "status")
            shown.append(status.stdout + status.stderr)
            return "telegram  up" in status.stdout

        assert wait_until(telegram_up, timeout=20, every=0.2), shown[-1]
        assert f"daemon     running, pid {first.proc.pid}" in shown[-1]
    finally:
        first.stop()
    answers = Counter(s.text for s in telegram.sent)
    assert answers == Counter(f"echo: m{i}" for i in range(5))  # each exactly once

    after = rousseau(first, "status")
    assert "daemon     not running" in after.stdout


def test_status_without_a_daemon_still_prints_the_counts(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"state:\n  path: {tmp_path / 's.db'}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    status = subprocess.run(
        [*ROUSSEAU, "--config", str(config), "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert status.returncode == 0, status.stderr
    assert "daemon     not running" in status.stdout
    assert "0 sessions" in status.stdout
