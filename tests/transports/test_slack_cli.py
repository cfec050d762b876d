"""`rousseau slack` as a user runs it: a subprocess against the fake Slack and a fake model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.slack import FakeSlack
from tests.helpers import ROUSSEAU


def echo(recorded: Recorded) -> Reply:
    return openai_stream(openai_completion("**echo**: " + recorded.body["messages"][-1]["content"]))


def test_rousseau_slack_answers_a_dm_in_mrkdwn(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = echo
    slack = FakeSlack().start()
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "provider": "openai",
                "openai": {"api_key": "sk-test", "base_url": fake_llm.url + "/v1"},
                "slack": {"base_url": slack.url + "/api/", "allowlist": ["U0OWNER"]},
                "state": {"path": str(tmp_path / "s.db")},
                "agent": {"workspace": str(tmp_path / "ws")},
            }
        )
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SLACK_APP_TOKEN": slack.app_token,
        "SLACK_BOT_TOKEN": slack.bot_token,
    }
    proc = subprocess.Popen(
        [*ROUSSEAU, "--config", str(config), "slack"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        slack.wait_connections(1, timeout=30)
        slack.message("hello")
        deadline = time.monotonic() + 20
        while not slack.posted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.text for p in slack.posted] == ["*echo*: hello"]
        assert slack.posted[0].channel == "D0DM"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        slack.stop()
