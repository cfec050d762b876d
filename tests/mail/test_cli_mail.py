"""`doctor`, `rousseau run` and `rousseau email` with email, iMessage and SMS configured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.fakes.bluebubbles import PASSWORD, FakeBlueBubbles
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.sms import ACCOUNT_SID, AUTH_TOKEN, FakeTwilio
from tests.helpers import ROUSSEAU
from tests.mail.dovecot import Dovecot
from tests.transports.harness_email import EmailHarness


def echo(recorded: Recorded) -> Reply:
    return openai_stream(openai_completion("echo: " + recorded.body["messages"][-1]["content"]))


def wait_for(done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def run(config: Path, env: dict[str, str], command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*ROUSSEAU, "--config", str(config), command], env=env, stderr=subprocess.PIPE
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_doctor_run_and_email_alone(
    tmp_path: Path, fake_llm: FakeLLMServer, dovecot: Dovecot
) -> None:
    fake_llm.responder = echo
    mail = EmailHarness(dovecot)
    bluebubbles, twilio = FakeBlueBubbles().start(), FakeTwilio().start()
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "provider": "openai",
                "openai": {"api_key": "sk-test", "base_url": fake_llm.url + "/v1"},
                "email": {
                    "imap_addr": f"127.0.0.1:{dovecot.port}",
                    "imap_username": mail.user,
                    "imap_password": "secret",
                    "smtp_addr": f"127.0.0.1:{mail.smtp.port}",
                    "from": mail.address,
                    "tls": False,
                    "poll_interval": "2s",
                    "allowlist": [mail.owner],
                },
                "imessage": {
                    "base_url": bluebubbles.url,
                    "password": PASSWORD,
                    "poll_interval": "0.2s",
                    "allowlist": ["+15551230001"],
                },
                "sms": {
                    "account_sid": ACCOUNT_SID,
                    "auth_token": AUTH_TOKEN,
                    "from": "+15550000000",
                    "base_url": twilio.url,
                    "allowlist": ["+15551230002"],
                },
                "state": {"path": str(tmp_path / "s.db")},
                "agent": {"workspace": str(tmp_path / "ws")},
            }
        )
    )
    config.chmod(0o600)  # it holds secrets: doctor would say so
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    try:
        doctor = subprocess.run(
            [*ROUSSEAU, "--config", str(config), "doctor"], env=env, capture_output=True, text=True
        )
        assert doctor.returncode == 0, doctor.stdout
        for line in ("ok    email", "ok    imessage", "ok    sms"):
            assert line in doctor.stdout

        proc = run(config, env, "run")
        try:
            wait_for(lambda: bool(bluebubbles.queries))
            bluebubbles.receive(
                "hi imessage", sender="+15551230001", chat="iMessage;-;+15551230001"
            )
            mail.dm("hi email")
            wait_for(lambda: bool(bluebubbles.sent and mail.delivered()))
        finally:
            stop(proc)
        assert [s["message"] for s in bluebubbles.sent] == ["echo: hi imessage"]
        assert [d.text for d in mail.delivered()] == ["echo: hi email"]

        proc = run(config, env, "email")
        try:
            mail.dm("only email now")
            wait_for(lambda: len(mail.delivered()) == 2)
        finally:
            stop(proc)
        assert mail.delivered()[1].text == "echo: only email now"
    finally:
        mail.close()
        bluebubbles.stop()
        twilio.stop()
