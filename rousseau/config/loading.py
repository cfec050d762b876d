"""Loading: a YAML file, then well-known secret variables, then ROUSSEAU_* overrides, merged
and validated into a `Config`. Every mistake becomes a ConfigError naming the key path, e.g.
`agent.max_iterations: Input should be a valid integer`.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import BaseModel, ValidationError

from rousseau.agent.errors import ConfigError
from rousseau.config.base import BUILTIN_PROVIDERS
from rousseau.config.root import Config
from rousseau.config.transports import TransportConfig

if typing.TYPE_CHECKING:
    from rousseau.plugins import Configured

DEFAULT_PATH = "~/.config/rousseau/config.yaml"


# Well-known variables that fill a key when the file leaves it unset.
SECRET_ENV: dict[str, tuple[str, str]] = {
    "ANTHROPIC_API_KEY": ("anthropic", "api_key"),
    "OPENAI_API_KEY": ("openai", "api_key"),
    "OPENROUTER_API_KEY": ("openrouter", "api_key"),
    "TELEGRAM_BOT_TOKEN": ("telegram", "token"),
    "SLACK_APP_TOKEN": ("slack", "app_token"),
    "SLACK_BOT_TOKEN": ("slack", "bot_token"),
    "DISCORD_TOKEN": ("discord", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
    "MATRIX_ACCESS_TOKEN": ("matrix", "access_token"),
    "MATRIX_PASSWORD": ("matrix", "password"),
    "EMAIL_IMAP_PASSWORD": ("email", "imap_password"),
    "EMAIL_SMTP_PASSWORD": ("email", "smtp_password"),
    "BLUEBUBBLES_PASSWORD": ("imessage", "password"),
    "TWILIO_AUTH_TOKEN": ("sms", "auth_token"),
    "VONAGE_API_SECRET": ("sms", "api_secret"),
    "IRC_PASSWORD": ("irc", "password"),
    "XMPP_PASSWORD": ("xmpp", "password"),
    "MATTERMOST_TOKEN": ("mattermost", "token"),
    "TEAMS_APP_PASSWORD": ("teams", "app_password"),
    "FEISHU_APP_SECRET": ("feishu", "app_secret"),
}
_NOT_SETTINGS = frozenset({"ROUSSEAU_CONFIG"})


def config_path(explicit: str | None, environ: Mapping[str, str]) -> tuple[Path, bool]:
    """The file to read, and whether it must exist (it must when named explicitly)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if environ.get("ROUSSEAU_CONFIG"):
        return Path(environ["ROUSSEAU_CONFIG"]).expanduser(), True
    return Path(DEFAULT_PATH).expanduser(), False


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read, merge and validate the configuration, or raise ConfigError with one clear line."""
    env = os.environ if environ is None else environ
    file, required = config_path(path, env)
    data = _read_yaml(file, required)
    digest = _digest(file)
    origins: dict[tuple[str, ...], str] = {}
    for var, (section, key) in SECRET_ENV.items():
        if env.get(var):
            node = data.setdefault(section, {})
            if isinstance(node, dict) and node.get(key) in (None, ""):
                node[key] = env[var]
                origins[(section, key)] = var
    for var, value in env.items():
        if not var.startswith("ROUSSEAU_") or var in _NOT_SETTINGS:
            continue
        found = _env_keys(Config, var[len("ROUSSEAU_") :].lower())
        if found is None:
            raise ConfigError(f"{var}: no such setting")
        keys, annotation = found
        _set(data, keys, _env_value(value, annotation))
        origins[tuple(keys)] = var
    resolved = _resolve_references(data, env, file.parent)
    from rousseau.config_go import translate_go_keys

    go = translate_go_keys(data)
    origins = go.moved | origins
    shown = file if file.exists() else None
    plugins = _plugin_sections(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, shown, origins)) from None
    config.source = str(file) if file.exists() else ""
    config.resolved = resolved
    config._environ = env
    config._digest = digest
    config.notices.update(go.notices)
    # A provider plugin named by `provider`, `fallback` or an agent, with no section: {}.
    named = [config.provider, *config.fallback, *(a.provider for a in config.agents.values())]
    for name in named:
        if name is not None and name not in BUILTIN_PROVIDERS:
            plugins.setdefault(name, None)
    for name, section in plugins.items():
        config.plugins[name] = _configure(name, section, shown, origins)
    return config


_REFERENCE = re.compile(r"^(?:env:([A-Za-z_][A-Za-z0-9_]*)|file:([^\n]+))$")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
MAX_SECRET_FILE = 64 * 1024
"""A secret file larger than this is not a secret (a wrong path, most likely)."""


def _resolve_references(data: Any, env: Mapping[str, str], base: Path) -> list[str]:
    """Each string value `env:NAME` or `file:PATH` replaced, in place, by what it names (a
    file's text without its last newline; a relative path from the config file's folder;
    $VARIABLES in it expanded, such as systemd's $CREDENTIALS_DIRECTORY); the values found.
    A reference that names nothing is a ConfigError naming the key."""
    found: list[str] = []

    def resolve(value: str, path: list[str]) -> str:
        match = _REFERENCE.match(value)
        if match is None:
            return value
        key = ".".join(path) or "(top level)"
        name, where = match.groups()
        if name is not None:
            if name not in env:
                raise ConfigError(f"{key}: env:{name} names a variable that is not set")
            said = env[name]
        else:
            said = _read_secret(_expanded(where.strip(), env, key), base, key)
        found.append(said)
        return said

    def walk(node: Any, path: list[str]) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in list(items):
            if isinstance(v, str):
                node[k] = resolve(v, [*path, str(k)])
            elif isinstance(v, dict | list):
                walk(v, [*path, str(k)])

    walk(data, [])
    return [s for s in found if s]


def _expanded(path: str, env: Mapping[str, str], key: str) -> str:
    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            raise ConfigError(f"{key}: file:{path} uses ${name}, which is not set")
        return env[name]

    return _VARIABLE.sub(variable, path)


def _read_secret(path: str, base: Path, key: str) -> str:
    file = Path(path).expanduser()
    file = file if file.is_absolute() else base / file
    try:
        if file.stat().st_size > MAX_SECRET_FILE:
            raise ConfigError(f"{key}: file:{path} is larger than a secret ({file})")
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{key}: file:{path}: cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: file:{path}: {file} is not text") from None
    return text.removesuffix("\n").removesuffix("\r")


def plain_secrets(file: Path) -> list[str]:
    """The keys of `file` holding a secret written out (not an env: or file: reference),
    by the config's own notion of a secret (its SecretStr keys)."""
    data = _read_yaml(file, required=False)
    found: list[str] = []

    def walk(node: Any, model: type[BaseModel] | None, path: list[str]) -> None:
        if not isinstance(node, dict) or model is None:
            return
        for key, value in node.items():
            field = model.model_fields.get(str(key))
            if field is None:
                continue
            where = [*path, str(key)]
            if _is_secret(field.annotation):
                if isinstance(value, str) and value and _REFERENCE.match(value) is None:
                    found.append(".".join(where))
                continue
            sub = _model_of(field.annotation)
            if sub is not None:
                walk(value, sub, where)
            elif typing.get_origin(field.annotation) is dict and isinstance(value, dict):
                args = typing.get_args(field.annotation)
                inner = _model_of(args[1]) if len(args) == 2 else None
                for name, each in value.items():
                    walk(each, inner, [*where, str(name)])

    walk(data, Config, [])
    return found


def well_known_variable(key: str) -> str | None:
    """The usual variable that fills a key (`telegram.token`: TELEGRAM_BOT_TOKEN), the first
    of SECRET_ENV's where several do; None where none does."""
    section, _, name = key.partition(".")
    return next((v for v, keys in SECRET_ENV.items() if keys == (section, name)), None)


def _is_secret(annotation: Any) -> bool:
    from pydantic import SecretStr

    if annotation is SecretStr:
        return True
    return SecretStr in typing.get_args(annotation)


def _digest(file: Path) -> str:
    """The file's bytes' hash, short (what `status` shows of the config a daemon runs)."""
    import hashlib

    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()[:12]
    except OSError:
        return ""


def _plugin_sections(data: dict[str, Any]) -> dict[str, Any]:
    """The top-level keys that are installed plugins' sections, taken out of `data`. The
    packages' metadata is read only when a key is not one of `Config`'s."""
    keys = {f.alias or n for n, f in Config.model_fields.items()}
    unknown = [k for k in data if k not in keys]
    if not unknown:
        return {}
    from rousseau.plugins import installed

    found = installed()
    return {k: data.pop(k) for k in unknown if k in found}


def _configure(
    name: str, section: Any, file: Path | None, origins: dict[tuple[str, ...], str]
) -> Configured:
    """Plugin `name` loaded and `section` validated by its model; a plugin that cannot be
    loaded is kept with the reason (it stops only itself); a section its model refuses is
    a ConfigError naming the key, as a built-in section's would be."""
    from rousseau.plugins import Configured, PluginError, installed, load

    item = installed()[name]
    try:
        plugin = load(item)
    except PluginError as exc:
        return Configured(item, None, section, error=str(exc))
    if item.kind == "transport" and not issubclass(plugin.config, TransportConfig):
        error = f"{item.target}: its config model does not subclass TransportConfig"
        return Configured(item, None, section, error=error)
    try:
        validated = plugin.config.model_validate(section if section is not None else {})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, file, origins, at=(name,), root=plugin.config)) from None
    return Configured(item, plugin, validated)


def log_notices(config: Config) -> None:
    """One warning per rousseau-agent key the config holds (call after logging is set up)."""
    log = structlog.get_logger("rousseau.config")
    for key, note in config.notices.items():
        log.warning("config.go_key", key=key, note=note)


def _read_yaml(file: Path, required: bool) -> dict[str, Any]:
    if not file.exists():
        if required:
            raise ConfigError(f"config file not found: {file}")
        return {}
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{file}{where}: invalid YAML: {problem}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{file}: the top level must be a mapping of keys")
    return loaded


def _describe(
    exc: ValidationError,
    file: Path | None,
    origins: dict[tuple[str, ...], str],
    *,
    at: tuple[str, ...] = (),
    root: type[BaseModel] = Config,
) -> str:
    """One line for every error of `exc`, validating `root` at key path `at`."""
    lines = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        loc = tuple(p for p in loc if p not in ("str", "int", "float", "bool"))
        unknown = _unknown_key(loc, root) if err["type"] == "extra_forbidden" else ""
        loc = at + loc
        path = ".".join(loc) or "(top level)"
        msg = unknown or err["msg"]
        msg = msg.removeprefix("Value error, ")
        var = next((v for k, v in origins.items() if loc[: len(k)] == k), None)
        lines.append(f"{path}: {msg}" + (f" (from {var})" if var else ""))
    prefix = f"{file}: " if file is not None else ""
    return prefix + "; ".join(lines)


def _unknown_key(loc: tuple[str, ...], root: type[BaseModel] = Config) -> str:
    """The words "unknown key", with the nearest key of its section when one is close."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:  # a list index or a mapping's own key: the model stays
            continue
        model = _model_of(field.annotation)
    if model is None or not loc:
        return "unknown key"
    keys = [f.alias or n for n, f in model.model_fields.items() if n not in ("source", "resolved")]
    near = difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6)
    return f"unknown key; did you mean {near[0]}?" if near else "unknown key"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def _env_keys(model: type[BaseModel], rest: str) -> tuple[list[str], Any] | None:
    """Map `agent_max_iterations` to ["agent", "max_iterations"] (and its type) via the model."""
    fields = sorted(model.model_fields.items(), key=lambda kv: -len(kv[1].alias or kv[0]))
    for name, field in fields:
        key = field.alias or name
        if key in ("source", "resolved") and model is Config:
            continue
        if rest == key:
            return [key], field.annotation
        sub = _model_of(field.annotation)
        if sub is not None and rest.startswith(key + "_"):
            found = _env_keys(sub, rest[len(key) + 1 :])
            if found is not None:
                return [key, *found[0]], found[1]
    return None


def _env_value(value: str, annotation: Any) -> Any:
    """A variable's text as the key wants it: YAML for [..] and {..}, commas for lists."""
    text = value.strip()
    if text[:1] in ("[", "{"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return value
    if typing.get_origin(annotation) is list:
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _set(data: dict[str, Any], keys: list[str], value: Any) -> None:
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value
