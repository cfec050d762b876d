"""`rousseau init` as a user runs it: at a pseudo-terminal, answering its questions, and with
flags alone; the model and the Telegram Bot API are the fakes on 127.0.0.1."""

from __future__ import annotations

import itertools
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rousseau.config import load_config
from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import BOT_USERNAME, FakeTelegram
from tests.helpers import ROUSSEAU, free_port
from tests.init_support import (
    KEY,
    init_env,
    init_quietly,
)
from tests.terminal import Terminal

OWNER = 4242
BAD_TOKEN = "123456:not-the-token"
_update_ids = itertools.count(9000)


def private_message(
    telegram: FakeTelegram, user_id: int, text: str, **names: str
) -> dict[str, Any]:
    """A private message as Telegram delivers it, from a user with these names."""
    user = {"id": user_id, "is_bot": False, **names}
    update = {
        "update_id": next(_update_ids),
        "message": {
            "message_id": next(_update_ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private", "first_name": names["first_name"]},
            "from": user,
            "text": text,
        },
    }
    telegram.deliver(update)
    return update


@pytest.fixture
def env(tmp_path: Path, fake_llm: FakeLLMServer, telegram: FakeTelegram) -> dict[str, str]:
    """No keys: the fakes' addresses, and a home of the test's own."""
    return init_env(tmp_path, fake_llm) | {
        "ROUSSEAU_OLLAMA_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "ROUSSEAU_TELEGRAM_BASE_URL": telegram.url,
    }


def init(
    *args: str, env: dict[str, str], config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return init_quietly(env, *args, config=config)


def default_config(home: Path) -> Path:
    return home / ".config" / "rousseau" / "config.yaml"


def one_line(result: subprocess.CompletedProcess[str], *secrets: str) -> str:
    """The single stderr line a failure prints; it never shows a secret or a traceback."""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for secret in secrets:
        assert secret not in result.stderr + result.stdout
    return result.stderr


@pytest.mark.timeout(120)
def test_at_a_terminal_the_owner_is_admitted_by_their_first_message_and_then_answered(
    tmp_path: Path, env: dict[str, str], telegram: FakeTelegram, fake_llm: FakeLLMServer
) -> None:
    term = Terminal([*ROUSSEAU, "init"], env)
    term.expect("Choose [")
    term.type("openai")
    term.expect("openai API key (input hidden; Enter if the server needs none): ")
    term.type(KEY)
    term.expect("Model [gpt-4.1-mini]: ")
    term.type("")
    term.expect("ok    openai answers with this key")
    term.expect("Where will people talk to it?")
    term.expect("Choose [telegram]: ")
    term.type("")
    term.expect("Bot token (input hidden): ")
    term.type(telegram.token)
    term.expect(f"ok    the token is @{BOT_USERNAME}'s")
    term.expect(f"Now send any message to @{BOT_USERNAME}")
    term.expect("Waiting up to 300 s")
    private_message(telegram, 666, "hi bot", first_name="Mallory")
    term.expect("Message from Mallory (id 666).")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("n")
    term.expect("Waiting for another message")
    setup = private_message(
        telegram, OWNER, "it's me", first_name="Ann", last_name="Smith", username="ann"
    )
    term.expect(f"Message from Ann Smith (@ann, id {OWNER}).")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("y")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    assert KEY not in term.output and telegram.token not in term.output
    assert "Traceback" not in term.output

    path = default_config(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no staged file left
    config = load_config(str(path), {})
    assert config.provider == "openai" and config.openai.model == "gpt-4.1-mini"
    assert config.openai.api_key is not None and config.openai.api_key.get_secret_value() == KEY
    assert config.telegram is not None and config.telegram.allowlist == [str(OWNER)]
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"telegram:{OWNER}"]
    assert max(telegram.offsets) > setup["update_id"]  # acknowledged: never answered

    # The same answers as flags, without a terminal, write the same file.
    same = ["--yes", "--provider", "openai", "--allow", str(OWNER), "--no-check"]
    keys = {"OPENAI_API_KEY": KEY, "TELEGRAM_BOT_TOKEN": telegram.token}
    flags = init(*same, config=tmp_path / "flags.yaml", env={**env, **keys})
    assert flags.returncode == 0, flags.stderr
    assert (tmp_path / "flags.yaml").read_text() == path.read_text()

    with (tmp_path / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [*ROUSSEAU, "run"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
    try:
        private_message(telegram, OWNER, "are you there?", first_name="Ann")
        [sent] = telegram.wait_sent(1, timeout=30)
        assert (sent.chat_id, sent.text) == (OWNER, "echo: are you there?")
        asked = [r.body["messages"][-1]["content"] for r in fake_llm.posts()]
        assert asked == ["are you there?"]  # neither set-up message reached the model
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, (tmp_path / "daemon.log").read_text()


def test_flags_alone_write_the_config_without_a_terminal(
    tmp_path: Path, env: dict[str, str], telegram: FakeTelegram
) -> None:
    secrets = ["--api-key", KEY, "--telegram-token", telegram.token]
    owners = ["--allow", str(OWNER), "--allow", "43"]
    as_flags = init("--yes", "--provider", "openai", *secrets, *owners, env=env)
    assert as_flags.returncode == 0, as_flags.stderr
    assert KEY not in as_flags.stdout + as_flags.stderr
    assert telegram.token not in as_flags.stdout + as_flags.stderr
    path = default_config(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = load_config(str(path), {})  # the file alone, without this shell's variables
    assert config.telegram is not None and config.telegram.allowlist == [str(OWNER), "43"]
    assert config.telegram.base_url == env["ROUSSEAU_TELEGRAM_BASE_URL"]
    assert config.openai.base_url == env["ROUSSEAU_OPENAI_BASE_URL"]
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"telegram:{OWNER}", "telegram:43"]
    assert telegram.calls.count("getMe") == 1 and "getUpdates" not in telegram.calls

    keys = {"OPENAI_API_KEY": KEY, "TELEGRAM_BOT_TOKEN": telegram.token}
    from_env = init(
        "--yes", *owners, "--no-check", config=tmp_path / "env.yaml", env={**env, **keys}
    )
    assert from_env.returncode == 0, from_env.stderr
    assert (tmp_path / "env.yaml").read_text() == path.read_text()


@pytest.mark.timeout(120)
def test_an_openai_compatible_server_is_asked_for_and_asked_again_when_nothing_answers(
    tmp_path: Path, env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    server = env.pop("ROUSSEAU_OPENAI_BASE_URL")
    term = Terminal([*ROUSSEAU, "init"], env)
    term.expect("Choose [")
    term.type("2")
    term.expect("Address [https://api.openai.com/v1]: ")
    term.type(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    term.expect("openai API key (input hidden; Enter if the server needs none): ")
    term.type("")
    term.expect("Model [gpt-4.1-mini]: ")
    term.type("local-model")
    term.expect("FAIL  ")
    term.expect("Address [")  # the address is asked again, not the key
    term.type(server)
    term.expect("ok    openai answers")
    term.expect("Choose [telegram]: ")
    term.type("none")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    config = load_config(str(default_config(tmp_path)), {})
    assert (config.provider, config.openai.base_url, config.openai.model) == (
        "openai",
        server,
        "local-model",
    )


def test_a_missing_sdk_is_named_with_the_command_for_this_installation() -> None:
    from rousseau.agent.errors import install_command
    from rousseau.cli.init import missing_sdk

    assert missing_sdk("json", "telegram") is None
    said = missing_sdk("no_such_sdk_here", "telegram")
    assert said is not None and said.endswith(install_command("telegram"))
    command = install_command("telegram")
    assert " -m pip install " in command and "[telegram]" in command
    assert "'rousseau[telegram]'" in command or " -e " in command  # index, or this checkout


def test_an_existing_config_is_replaced_only_with_force(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = default_config(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("log: {level: debug}\n")
    args = ("--yes", "--provider", "openai", "--no-check")
    refused = init(*args, env={**env, "OPENAI_API_KEY": KEY})
    assert refused.returncode == 1
    assert "already exists; pass --force" in one_line(refused)
    assert path.read_text() == "log: {level: debug}\n"

    replaced = init(*args, "--force", env={**env, "OPENAI_API_KEY": KEY})
    assert replaced.returncode == 0, replaced.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_config(str(path), {}).provider == "openai"


@pytest.mark.parametrize(
    ("args", "with_key", "code", "says"),
    [
        (["--yes", "--provider", "openai"], False, 2, "needs an API key: set OPENAI_API_KEY"),
        (["--provider", "openai"], False, 2, "no terminal to ask questions on"),
        (["--yes", "--telegram-token", BAD_TOKEN, "--allow", "42"], True, 1, "token was rejected"),
        (["--yes", "--telegram-token", "TOKEN"], True, 2, "needs --allow ID: nobody"),
        (["--yes", "--allow", "ann"], True, 2, "a Telegram user id is a number"),
    ],
    ids=["no key", "no terminal", "token rejected", "nobody admitted", "id not a number"],
)
def test_a_failure_is_one_line_and_writes_nothing(
    tmp_path: Path,
    env: dict[str, str],
    telegram: FakeTelegram,
    args: list[str],
    with_key: bool,
    code: int,
    says: str,
) -> None:
    args = [telegram.token if a == "TOKEN" else a for a in args]
    result = init(*args, env={**env, "OPENAI_API_KEY": KEY} if with_key else env)
    assert result.returncode == code
    assert says in one_line(result, KEY, BAD_TOKEN, telegram.token)
    assert not default_config(tmp_path).exists()


def test_cancelling_at_a_prompt_or_while_waiting_writes_nothing(
    tmp_path: Path, env: dict[str, str], telegram: FakeTelegram
) -> None:
    term = Terminal([*ROUSSEAU, "init"], env)
    term.expect("Choose [")
    term.end_of_input()
    assert term.exit_code() == 1
    assert "rousseau: set-up cancelled; nothing written" in term.output
    assert "Traceback" not in term.output

    given = ["--provider", "openai", "--api-key", KEY, "--model", "m", "--no-check"]
    waiting = Terminal([*ROUSSEAU, "init", *given, "--telegram-token", telegram.token], env)
    waiting.expect("Waiting up to")
    waiting.proc.send_signal(signal.SIGINT)
    assert waiting.exit_code() == 130
    assert "rousseau: set-up cancelled; nothing written" in waiting.output
    assert "Traceback" not in waiting.output and KEY not in waiting.output
    assert not default_config(tmp_path).exists()
    assert list(default_config(tmp_path).parent.iterdir()) == []


def test_a_telegram_bot_added_to_a_config_without_transport(
    tmp_path: Path, env: dict[str, str], telegram: FakeTelegram
) -> None:
    first = init("--yes", "--provider", "openai", "--no-check", env={**env, "OPENAI_API_KEY": KEY})
    assert first.returncode == 0, first.stderr
    path = default_config(tmp_path)
    before = path.read_text()
    keys = {**env, "TELEGRAM_BOT_TOKEN": telegram.token}
    added = init("--add", "telegram", "--yes", "--allow", str(OWNER), env=keys)
    assert added.returncode == 0, added.stderr
    assert path.read_text().startswith(before)  # what was there stays, word for word
    config = load_config(str(path), {})
    assert config.telegram is not None and config.telegram.allowlist == [str(OWNER)]
    assert config.telegram.base_url == env["ROUSSEAU_TELEGRAM_BASE_URL"]
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"telegram:{OWNER}"]
    assert telegram.calls.count("getMe") == 1  # the token was checked
