"""`rousseau run` with every transport configured, and `doctor` checking each token."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.fakes.discord import OWNER_ID, FakeDiscord
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU


def echo(recorded: Recorded) -> Reply:
    return openai_stream(openai_completion("echo: " + recorded.body["messages"][-1]["content"]))


def test_run_serves_every_configured_transport(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = echo
    telegram, slack, discord = FakeTelegram().start(), FakeSlack().start(), FakeDiscord().start()
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "provider": "openai",
                "openai": {"api_key": "sk-test", "base_url": fake_llm.url + "/v1"},
                "telegram": {"token": telegram.token, "base_url": telegram.url, "allowlist": [42]},
                "slack": {
                    "app_token": slack.app_token,
                    "bot_token": slack.bot_token,
                    "base_url": slack.url + "/api/",
                    "allowlist": ["U0OWNER"],
                },
                "discord": {
                    "token": discord.token,
                    "api_base": discord.api_base,
                    "gateway_url": discord.gateway_url,
                    "allowlist": [OWNER_ID],
                },
                "state": {"path": str(tmp_path / "s.db")},
                "agent": {"workspace": str(tmp_path / "ws")},
                "log": {"level": "debug"},  # a failure below shows what the SDKs saw
            }
        )
    )
    config.chmod(0o600)  # it holds secrets: doctor would say so
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    doctor = subprocess.run(
        [*ROUSSEAU, "--config", str(config), "doctor"], env=env, capture_output=True, text=True
    )
    assert doctor.returncode == 0, doctor.stdout
    for line in ("ok    telegram", "ok    slack", "ok    discord"):
        assert line in doctor.stdout
    log = tmp_path / "daemon.log"  # a file: a debug log in a pipe nobody reads would fill it
    with log.open("wb") as stderr:
        proc = subprocess.Popen([*ROUSSEAU, "--config", str(config), "run"], env=env, stderr=stderr)
    try:
        slack.wait_connections(1, timeout=30)
        discord.wait_ready(timeout=30)
        telegram.push("hi telegram")
        slack.message("hi slack")
        discord.dm("hi discord")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (telegram.sent and slack.posted and discord.sent):
            time.sleep(0.05)
        answered = (
            [s.text for s in telegram.sent],
            [p.text for p in slack.posted],
            [m.content for m in discord.sent],
        )
        if answered != (["echo: hi telegram"], ["echo: hi slack"], ["echo: hi discord"]):
            gateway = f"identifies={discord.identifies} resumes={discord.resumes}"
            said = log.read_text(errors="replace")[-20000:]  # which transport lost what
            raise AssertionError(f"answered: {answered}\n{gateway}\ndaemon log:\n{said}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        telegram.stop()
        slack.stop()
        discord.stop()
