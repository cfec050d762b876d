"""What bash's environment holds: nothing that carries a credential, by its name, by a
configured secret inside its value, or by a URL with a password; `agent.bash_env` lets a
named variable through anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from rousseau.agent import ToolCall
from rousseau.assembly import build_registry
from rousseau.config import Config
from rousseau.tools import builtin_registry, scrubbed_environ

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")
SECRET = "tg-9f3e2a7c41d8"
"""A configured secret (say telegram.token), long enough to be looked for inside values."""

DAEMON_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "EDITOR": "vi",
    "http_proxy": "http://proxy.internal:3128",
    "NO_PROXY": "localhost,127.0.0.1",
    "HTTPS_PROXY": "http://alice:hunter2hunter2@proxy.internal:3128",
    "OPENAI_KEY": "not-a-configured-secret-1",
    "DATABASE_URL": "postgres:///app",
    "REDIS_URI": "redis://cache:6379/0",
    "SMTP_PASS": "mail-pass-1",
    "DB_PWD": "db-pwd-1",
    "SENTRY_DSN": "https://abc@o1.ingest.sentry.io/2",
    "GIT_REMOTE": "https://x-access-token:ghs_abcdef@github.com/o/r.git",
    "CURL_OPTS": f"--header Authorization:Bearer:{SECRET} --silent",
    "HOOK": f"https://example.org/hook?token={SECRET[:6]}&x=1",
    "GITHUB_PERSONAL": "ghp_" + "a" * 36,
    "DEPLOY_CREDENTIALS_FILE": "/srv/creds.json",
}
KEPT = {"PATH", "LANG", "EDITOR", "http_proxy", "NO_PROXY"}


def test_every_variable_that_carries_a_credential_is_removed() -> None:
    env = scrubbed_environ(DAEMON_ENV, secrets=[SECRET])
    assert set(env) == KEPT
    assert env["http_proxy"] == "http://proxy.internal:3128"  # a URL without a password stays


def test_a_short_secret_is_matched_whole_only() -> None:
    """A secret too short to look for inside values would remove innocent ones."""
    env = scrubbed_environ({"A": "abcd", "B": "xxabcdxx", "PATH": "/bin"}, secrets=["abcd"])
    assert env == {"B": "xxabcdxx", "PATH": "/bin"}


def test_named_variables_are_let_through() -> None:
    env = scrubbed_environ(DAEMON_ENV, secrets=[SECRET], allow=["OPENAI_KEY", "CURL_OPTS"])
    assert set(env) == KEPT | {"OPENAI_KEY", "CURL_OPTS"}


async def test_bash_sees_none_of_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DAEMON_ENV.items():
        monkeypatch.setenv(name, value)
    tools = builtin_registry(tmp_path, secrets=[SECRET])
    out = await tools.get("bash").execute({"command": "env"}, CALL)
    assert not out.is_error and "EDITOR=vi" in out.content
    seen = {line.split("=", 1)[0] for line in out.content.splitlines()}
    for name in set(DAEMON_ENV) - KEPT:
        assert name not in seen
    for leak in ("hunter2", SECRET, "ghs_abcdef", "not-a-configured-secret", "mail-pass"):
        assert leak not in out.content


async def test_agent_bash_env_lets_a_named_variable_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # build_registry makes this test process non-dumpable: harmless here (it closes this
    # process's /proc/PID files to other processes and disables its core dumps, nothing more).
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "b" * 36)
    monkeypatch.setenv("NPM_TOKEN", "npm_" + "c" * 36)
    config = Config.model_validate(
        {"agent": {"workspace": str(tmp_path), "bash_env": ["GITHUB_TOKEN"]}}
    )
    out = await build_registry(config).get("bash").execute({"command": "env"}, CALL)
    assert f"GITHUB_TOKEN=ghp_{'b' * 36}" in out.content.splitlines()
    assert "NPM_TOKEN" not in out.content


def test_agent_bash_env_takes_variable_names() -> None:
    from pydantic import ValidationError

    assert Config().agent.bash_env == []
    with pytest.raises(ValidationError, match="bash_env"):
        Config.model_validate({"agent": {"bash_env": ["A=B"]}})
