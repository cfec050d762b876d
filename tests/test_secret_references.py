"""Secrets kept out of the config file: `env:NAME` and `file:PATH` references resolve at load
(a relative path from the file's folder, $VARIABLES expanded as systemd's credentials
directory needs), a reference naming nothing names the key, what they resolve to is masked
like any secret, and `rousseau doctor` finds secrets written in plain text."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from rousseau.agent import ConfigError
from rousseau.config import load_config
from rousseau.log import Redactor
from tests.test_doctor import config, doctor, lines

TOKEN = "555555:referencedSECRETreferencedSECRETxx"
KEY = "sk-fileSECRETfileSECRETfileSECRET"


def test_env_and_file_references_resolve(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "openai").write_text(KEY + "\n")
    (tmp_path / "webhook-secret").write_text("hook-secret-value")
    (tmp_path / "config.yaml").write_text(
        "telegram:\n  token: env:BOT_TOKEN\n"
        "  webhook: {url: 'https://bot.example.org/hook', secret: 'file:webhook-secret'}\n"
        "openai:\n  api_key: file:${CREDENTIALS_DIRECTORY}/openai\n"
        "web:\n  public_url: env:PUBLIC_URL\n"
    )
    env = {
        "BOT_TOKEN": TOKEN,
        "CREDENTIALS_DIRECTORY": str(credentials),
        "PUBLIC_URL": "https://bot.example.org",
        "HOME": str(tmp_path),
    }
    loaded = load_config(str(tmp_path / "config.yaml"), env)
    assert loaded.telegram is not None and loaded.telegram.token is not None
    assert loaded.telegram.token.get_secret_value() == TOKEN
    assert loaded.telegram.webhook is not None and loaded.telegram.webhook.secret is not None
    assert loaded.telegram.webhook.secret.get_secret_value() == "hook-secret-value"
    assert loaded.openai.api_key is not None
    assert loaded.openai.api_key.get_secret_value() == KEY  # without the file's newline
    assert loaded.web is not None and loaded.web.public_url == "https://bot.example.org"
    # whatever a reference resolved to is masked, even in a key that is not a secret's
    redactor = Redactor(loaded.secrets())
    said = redactor.redact(f"{TOKEN} {KEY} hook-secret-value https://bot.example.org")
    assert TOKEN not in said and KEY not in said and "hook-secret-value" not in said


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("telegram:\n  token: env:NOT_SET\n", r"^telegram\.token: env:NOT_SET names a variable"),
        ("openai:\n  api_key: file:missing\n", r"^openai\.api_key: file:missing: cannot read"),
        (
            "openai:\n  api_key: file:$NOWHERE/key\n",
            r"^openai\.api_key: file:\$NOWHERE/key uses \$NOWHERE, which is not set",
        ),
    ],
)
def test_a_reference_to_nothing_names_the_key(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=error) as raised:
        load_config(str(tmp_path / "config.yaml"), {"HOME": str(tmp_path)})
    assert "\n" not in str(raised.value)


def test_a_resolved_secret_never_reaches_a_log_line(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("telegram:\n  token: env:BOT_TOKEN\n")
    loaded = load_config(str(tmp_path / "config.yaml"), {"BOT_TOKEN": "plain-looking-secret-1"})
    redactor = Redactor(loaded.secrets())
    with capture_logs(processors=[redactor]) as logs:
        structlog.get_logger("test").warning("failed", error="refused plain-looking-secret-1")
    assert logs[0]["error"] == "refused [REDACTED]"


def test_doctor_finds_a_token_in_plain_text_and_not_a_reference(tmp_path: Path) -> None:
    path = config(tmp_path, telegram={"token": "555555:doctorSECRETdoctorSECRETdoctorSECRET"})
    found = doctor(path)
    [warned] = [line for line in lines(found, "warn") if "telegram.token" in line]
    assert "telegram.token is written in config.yaml in plain text" in warned
    assert "token: env:TELEGRAM_BOT_TOKEN" in warned
    assert any("openai.api_key is written" in line for line in lines(found, "warn"))
    (tmp_path / "token").write_text("555555:doctorSECRETdoctorSECRETdoctorSECRET")
    path = config(
        tmp_path, telegram={"token": "file:token"}, openai={"api_key": "env:OPENAI_API_KEY"}
    )
    moved = doctor(path)
    assert not [line for line in lines(moved, "warn") if "secrets" in line]
