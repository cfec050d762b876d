"""Config: YAML, secret variables, ROUSSEAU_* overrides, and errors that name the key."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from rousseau.agent import ConfigError
from rousseau.config import Config, load_config, parse_duration
from rousseau.config.loading import _model_of

EXAMPLE = Path(__file__).parent.parent / "config" / "config.yaml"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = load_config(None, {"HOME": str(tmp_path)})
    assert config.agent.max_iterations == 32
    assert config.agent.bash_timeout == 60
    assert config.telegram is None and config.source == ""


def test_example_file_loads_and_equals_the_defaults() -> None:
    config = load_config(str(EXAMPLE), {})
    assert config.model_dump() == Config().model_dump()


def _paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        if name in ("source", "resolved"):
            continue
        key = field.alias or name
        out.append(prefix + key)
        sub = _model_of(field.annotation)
        args = typing.get_args(field.annotation)
        if sub is None and typing.get_origin(field.annotation) is dict and args:
            sub = _model_of(args[1])
            if sub is not None:
                continue  # mcp_servers entries are documented by example
        if sub is not None:
            out += _paths(sub, prefix + key + ".")
    return out


def test_example_file_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    missing = [
        p
        for p in _paths(Config)
        if not re.search(rf"^\s*#?\s*{re.escape(p.split('.')[-1])}:", text, re.M)
    ]
    assert missing == []


def test_wrong_type_names_the_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, "agent:\n  max_iterations: lots\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert "agent.max_iterations: Input should be a valid integer" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "agent:\n  max_iteration: 3\ntelegramm: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert "agent.max_iteration: unknown key; did you mean max_iterations?" in str(err.value)
    assert "telegramm: unknown key; did you mean telegram?" in str(err.value)


def test_an_unknown_key_far_from_any_gets_no_guess(tmp_path: Path) -> None:
    path = write(tmp_path, "agent:\n  colour: blue\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert str(err.value).endswith("agent.colour: unknown key")


def test_nested_and_list_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "agent:\n  approver:\n    mode: maybe\n    allow: [{match: x}]\n"
        "ratelimit: {default: fast}\nshutdown_grace: soon\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    text = str(err.value)
    assert "agent.approver.mode: Input should be" in text
    assert "agent.approver.allow.0.tool: Field required" in text
    assert "ratelimit.default: 'fast' is not a rate" in text
    assert "shutdown_grace: 'soon' is not a duration" in text


def test_bad_yaml_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config.yaml line 3: invalid YAML"):
        load_config(write(tmp_path, "agent:\n  - [\n"), {})
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"), {})


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(tmp_path / "nope.yaml"), {})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(None, {"ROUSSEAU_CONFIG": str(tmp_path / "nope.yaml")})


def test_environment_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "agent:\n  max_iterations: 5\ntelegram:\n  allowlist: [42]\n")
    config = load_config(
        path,
        {
            "ROUSSEAU_AGENT_MAX_ITERATIONS": "7",
            "ROUSSEAU_AGENT_COMPRESSION_ENABLED": "true",
            "ROUSSEAU_TELEGRAM_ALLOWLIST": "1, 2",
            "ROUSSEAU_MAX_CONCURRENT_TURNS": "3",
            "ROUSSEAU_EMAIL_FROM": "bot@example.org",
            "ROUSSEAU_MCP_SERVERS": "{fs: {command: npx}}",
        },
    )
    assert config.agent.max_iterations == 7
    assert config.agent.compression.enabled is True
    assert config.telegram is not None and config.telegram.allowlist == ["1", "2"]
    assert config.max_concurrent_turns == 3
    assert config.email is not None and config.email.from_ == "bot@example.org"
    assert config.mcp_servers["fs"].command == "npx"


def test_environment_errors_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"HOME": str(tmp_path), "ROUSSEAU_AGENT_MAX_ITERATIONS": "many"})
    assert "agent.max_iterations" in str(err.value)
    assert "ROUSSEAU_AGENT_MAX_ITERATIONS" in str(err.value)
    with pytest.raises(ConfigError, match="ROUSSEAU_AGENT_NOPE: no such setting"):
        load_config(None, {"HOME": str(tmp_path), "ROUSSEAU_AGENT_NOPE": "1"})


def test_secret_variables_fill_unset_keys_only(tmp_path: Path) -> None:
    path = write(tmp_path, "openai:\n  api_key: from-file\n")
    config = load_config(
        path,
        {
            "OPENAI_API_KEY": "from-env",
            "ANTHROPIC_API_KEY": "sk-ant-x",
            "TELEGRAM_BOT_TOKEN": "1:a",
        },
    )
    assert config.openai.api_key is not None
    assert config.openai.api_key.get_secret_value() == "from-file"
    assert config.anthropic.api_key is not None
    assert config.anthropic.api_key.get_secret_value() == "sk-ant-x"
    assert config.telegram is not None and config.telegram.token is not None
    assert sorted(config.secrets()) == ["1:a", "from-file", "sk-ant-x"]
    assert "sk-ant-x" not in repr(config)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("45", 45), (12, 12)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5x", "m5", "-3", True, "1h 30q"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_compression_keep_recent_must_be_below_trigger(tmp_path: Path) -> None:
    path = write(tmp_path, "agent:\n  compression: {trigger_messages: 5, keep_recent: 8}\n")
    with pytest.raises(ConfigError, match=r"agent\.compression: keep_recent must be smaller"):
        load_config(path, {})


def test_rates_parse_to_count_and_seconds() -> None:
    from rousseau.config import parse_rate

    assert parse_rate("20/1m") == (20, 60.0)
    assert parse_rate("5/m") == (5, 60.0)
    assert parse_rate("100/1h30m") == (100, 5400.0)
    for bad in ("fast", "0/1m", "20", "x/1m"):
        with pytest.raises(ValueError):
            parse_rate(bad)
