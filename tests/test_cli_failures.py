"""Every command against broken inputs: a non-zero exit, one clear line, no traceback, and
no configured secret in stdout, stderr or the error log."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU, free_port

TOKEN = "987654:SECRETsecretSECRETsecretSECRETsecret"
API_KEY = "sk-SECRETsecretSECRETsecret"
SECRETS = (TOKEN, API_KEY, "SECRETsecret")

COMMANDS = [
    ["chat", "-m", "hi"],
    ["run"],
    ["telegram"],
    ["session", "list"],
    ["session", "search", "x"],
    ["session", "show", "abc"],
    ["session", "delete", "abc", "--yes"],
    ["cron", "add", "--name", "n", "--schedule", "@hourly", "--prompt", "p", "--deliver-to",
     "telegram:42"],
    ["cron", "list"],
    ["cron", "run", "n"],
    ["cron", "remove", "n"],
    ["audit"],
    ["skills", "list"],
    ["skills", "show", "x"],
    ["pair", "list"],
    ["pair", "approve", "ABC"],
    ["status"],
    ["doctor"],
    ["send", "telegram:42", "hi"],
    ["mcp"],
    ["import-go", "go-sessions.db"],
    ["service", "install", "--dry-run"],
]  # fmt: skip
STORE_COMMANDS = [c for c in COMMANDS if c[0] not in ("skills", "service")]
REPORTS = {"doctor"}
"""Commands whose output is a report of several lines (still no traceback, no secret)."""


def config_text(
    tmp: Path, *, state: Path | None = None, extra: str = "", telegram: str = ""
) -> str:
    """A config whose model and Bot API are unreachable (closed ports) unless given."""
    telegram = telegram or f"http://127.0.0.1:{free_port()}"
    return (
        f"provider: openai\n"
        f"openai:\n  api_key: {API_KEY}\n  base_url: http://127.0.0.1:{free_port()}/v1\n"
        f"  max_retries: 0\n"
        f"telegram:\n  token: '{TOKEN}'\n  base_url: {telegram}\n"
        f"  allowlist: [42]\n"
        f"state:\n  path: {state or tmp / 's.db'}\n"
        f"agent:\n  workspace: {tmp / 'ws'}\n" + extra
    )


def run(
    tmp: Path, *args: str, stdout: int = subprocess.PIPE, timeout: float = 60
) -> tuple[int, str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "XDG_STATE_HOME": str(tmp / "xdg-state"),
    }
    proc = subprocess.Popen(
        [*ROUSSEAU, "--config", str(tmp / "config.yaml"), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out or "", err


def assert_clean_failure(tmp: Path, command: list[str], code: int, out: str, err: str) -> None:
    where = f"{' '.join(command)}: {err!r}"
    assert code != 0, where
    assert "Traceback" not in out + err, where
    if command[0] not in REPORTS:
        assert err.strip() and err.count("\n") == 1, where
    kept = tmp / "xdg-state" / "rousseau" / "rousseau-error.log"
    logged = kept.read_text() if kept.exists() else ""
    for secret in SECRETS:
        assert secret not in out + err + logged, where


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(f"telegram:\n  token: '{TOKEN}'\n  allowlist: [42\n", id="bad-yaml"),
        pytest.param(f"telegarm:\n  token: '{TOKEN}'\n", id="unknown-key"),
    ],
)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_broken_config_is_one_line(tmp_path: Path, broken: str, command: list[str]) -> None:
    (tmp_path / "config.yaml").write_text(broken)
    code, out, err = run(tmp_path, *command)
    assert_clean_failure(tmp_path, command, code, out, err)
    if command[0] in REPORTS:
        assert "FAIL  config" in out
    else:
        assert code == 2 and "config" in err


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=" ".join)
def test_an_unwritable_state_path_is_one_line(tmp_path: Path, command: list[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # a file where the state's folder should be (root can't write it)
    (tmp_path / "config.yaml").write_text(config_text(tmp_path, state=blocker / "s.db"))
    code, out, err = run(tmp_path, *command)
    assert_clean_failure(tmp_path, command, code, out, err)


@pytest.mark.parametrize("listen", ["127.0.0.1:notaport", "127.0.0.1", "[::1:80", "host:70000"])
def test_a_malformed_health_listen_is_named(tmp_path: Path, listen: str) -> None:
    extra = f"health:\n  listen: '{listen}'\n"
    (tmp_path / "config.yaml").write_text(config_text(tmp_path, extra=extra))
    code, out, err = run(tmp_path, "run")
    assert_clean_failure(tmp_path, ["run"], code, out, err)
    assert "health.listen" in err


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(token=TOKEN).start()
    yield fake
    fake.stop()


def test_a_taken_health_port_is_named(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        extra = f"health:\n  listen: 127.0.0.1:{port}\n"
        text = config_text(tmp_path, extra=extra, telegram=fake_telegram.url)
        (tmp_path / "config.yaml").write_text(text)
        code, out, err = run(tmp_path, "run")
    assert_clean_failure(tmp_path, ["run"], code, out, err)
    assert f"health.listen: cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.parametrize("command", [["chat", "-m", "hi"], ["doctor"]], ids=" ".join)
def test_an_unreachable_model_is_one_line(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "config.yaml").write_text(config_text(tmp_path))
    code, out, err = run(tmp_path, *command)
    assert_clean_failure(tmp_path, command, code, out, err)


def test_a_rejected_token_is_named_never_shown(tmp_path: Path) -> None:
    other = FakeTelegram(token="111111:another-token-entirely-not-ours-xx").start()
    try:
        (tmp_path / "config.yaml").write_text(config_text(tmp_path, telegram=other.url))
        code, out, err = run(tmp_path, "doctor")
        assert_clean_failure(tmp_path, ["doctor"], code, out, err)
        assert "telegram.token" in out
        code, out, err = run(tmp_path, "send", "telegram:42", "hi")
        assert_clean_failure(tmp_path, ["send"], code, out, err)
        assert "telegram.token" in err
    finally:
        other.stop()


@pytest.mark.parametrize(
    "command",
    [["session", "list"], ["cron", "list"], ["audit"], ["status"], ["version"], ["--help"]],
    ids=" ".join,
)
def test_a_closed_stdout_ends_quietly(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "config.yaml").write_text(config_text(tmp_path))
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line, as `| head -0` does
    try:
        code, _, err = run(tmp_path, *command, stdout=write)
    finally:
        os.close(write)
    assert (code, err) == (141, "")  # as `cat big | head` does: 128 + SIGPIPE, nothing said


def test_an_unexpected_error_says_where_its_traceback_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rousseau import cli
    from rousseau.cli import status

    def broken(args: object) -> int:
        raise RuntimeError(f"a bug, with {API_KEY} in its text")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(status, "version", broken)
    assert cli.main(["version"]) == 1
    err = capsys.readouterr().err
    kept = tmp_path / "rousseau" / "rousseau-error.log"
    assert err == (
        f"rousseau: unexpected RuntimeError: a bug, with [REDACTED] in its text"
        f" (traceback in {kept})\n"
    )
    assert "Traceback" in kept.read_text() and API_KEY not in kept.read_text()


def test_a_provider_that_cannot_be_built_stops_run_in_one_line(tmp_path: Path) -> None:
    """The provider is built while the transports start (its SDK's import is most of a
    start-up): one that cannot be built still stops the daemon with its config error."""
    text = config_text(tmp_path).replace("provider: openai", "provider: vertex")
    missing = tmp_path / "no-such-credentials.json"
    (tmp_path / "config.yaml").write_text(
        text + f"vertex:\n  project: p\n  region: us-east5\n  credentials_file: {missing}\n"
    )
    code, out, err = run(tmp_path, "run")
    assert code == 2, err
    assert "Traceback" not in out + err
    assert err.splitlines()[-1].startswith(
        f"rousseau: config error: vertex.credentials_file: cannot read {missing}"
    )
