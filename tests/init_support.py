"""What the tests of `rousseau init` share: the environment it runs in, starting it at a
terminal, the file it wrote, and `rousseau run` on that file."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.helpers import ROUSSEAU
from tests.terminal import Terminal

KEY = "sk-init-test-0123456789abcdefXYZ"


def echo(recorded: Recorded) -> Reply:
    return openai_stream(openai_completion(f"echo: {recorded.body['messages'][-1]['content']}"))


def init_env(tmp_path: Path, fake_llm: FakeLLMServer) -> dict[str, str]:
    """No keys: the fake model's address, and a home of the test's own."""
    fake_llm.responder = echo
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TERM": "dumb",
        "ROUSSEAU_OPENAI_BASE_URL": fake_llm.url + "/v1",
        "ROUSSEAU_OPENAI_MAX_RETRIES": "0",
    }


def start_init(env: dict[str, str], *args: str) -> Terminal:
    """`rousseau init` at a terminal, the model given by flags; stops at the platform menu."""
    term = Terminal(
        [*ROUSSEAU, "init", "--provider", "openai", "--api-key", KEY, "--model", "m", *args], env
    )
    term.expect("ok    openai answers with this key")
    return term


def written(home: Path) -> Path:
    path = home / ".config" / "rousseau" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path


class Running:
    """`rousseau run` on the written config, its log kept in a file."""

    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.log = home / "daemon.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*ROUSSEAU, "run"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.said():
            assert self.proc.poll() is None, self.said()
            assert time.monotonic() < deadline, f"{text!r} never logged:\n{self.said()}"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.said()


def init_quietly(
    env: dict[str, str], *args: str, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`rousseau init` without a terminal."""
    named = ["--config", str(config)] if config else []
    return subprocess.run(
        [*ROUSSEAU, *named, "init", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
