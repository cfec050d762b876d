"""Typed configuration: a YAML file, then well-known secret variables, then ROUSSEAU_* overrides.

Every mistake becomes a ConfigError naming the key path, e.g.
`agent.max_iterations: Input should be a valid integer`.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from rousseau.agent.errors import ConfigError

DEFAULT_PATH = "~/.config/rousseau/config.yaml"
DEFAULT_SYSTEM_PROMPT = (
    "You are rousseau, a capable personal assistant reached through chat. Answer plainly and "
    "briefly. Use your tools when they help; say what you did."
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: Any) -> float:
    """`90s`, `5m`, `1h30m`, `250ms` or plain seconds, as seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90s, 5m or 1h30m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"{value!r} is not a duration (use 90s, 5m, 1h30m or seconds)"
                ) from None
            scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
            seconds = sum(float(n) * scale[u] for n, u in parts)
    else:
        raise ValueError("expected a duration such as 90s, 5m or 1h30m")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_rate(value: str) -> tuple[int, float]:
    """`20/1m` (or `20/m`) as (20, 60.0): so many per so many seconds."""
    count, sep, period = value.partition("/")
    if not sep or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{value!r} is not a rate (use COUNT/PERIOD, e.g. 20/1m)")
    return int(count), parse_duration(period if period[:1].isdigit() else f"1{period}")


def _check_rate(value: str) -> str:
    parse_rate(value)
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Rate = Annotated[str, AfterValidator(_check_rate)]
SenderId = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]
Policy = Literal["allowlist", "pairing", "open"]
ProviderName = Literal[
    "anthropic", "openai", "openrouter", "ollama", "bedrock", "vertex", "claudecli"
]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- providers ------------------------------------------------------------------------------


class AnthropicConfig(Section):
    api_key: SecretStr | None = None
    model: str = "claude-sonnet-4-5"
    max_tokens: int = Field(default=8192, ge=1)
    base_url: str | None = None
    max_retries: int = Field(default=2, ge=0)
    timeout: Duration = 600.0
    prompt_caching: bool = True


class OpenAIConfig(Section):
    api_key: SecretStr | None = None
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    max_tokens: int = Field(default=4096, ge=1)
    max_retries: int = Field(default=2, ge=0)
    timeout: Duration = 600.0


class OpenRouterConfig(OpenAIConfig):
    model: str = "anthropic/claude-sonnet-4.5"
    base_url: str | None = "https://openrouter.ai/api/v1"


class OllamaConfig(OpenAIConfig):
    model: str = "llama3.2"
    base_url: str | None = "http://localhost:11434/v1"


class BedrockConfig(Section):
    region: str | None = None
    model: str = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    profile: str | None = None
    max_tokens: int = Field(default=8192, ge=1)
    base_url: str | None = None
    max_retries: int = Field(default=2, ge=0)
    timeout: Duration = 600.0
    prompt_caching: bool = True


class VertexConfig(Section):
    project: str | None = None
    region: str | None = None
    model: str = "claude-sonnet-4-5@20250929"
    credentials_file: str | None = None
    max_tokens: int = Field(default=8192, ge=1)
    base_url: str | None = None
    max_retries: int = Field(default=2, ge=0)
    timeout: Duration = 600.0
    prompt_caching: bool = True


class ClaudeCLIConfig(Section):
    binary: str = "claude"
    model: str = ""
    permission_mode: str = "default"
    extra_args: list[str] = Field(default_factory=list)


# -- agent ----------------------------------------------------------------------------------


class CompressionConfig(Section):
    enabled: bool = False
    trigger_messages: int = Field(default=60, ge=2)
    keep_recent: int = Field(default=8, ge=1)
    prompt: str = ""

    @model_validator(mode="after")
    def _keep_fewer_than_trigger(self) -> CompressionConfig:
        if self.keep_recent >= self.trigger_messages:
            raise ValueError("keep_recent must be smaller than trigger_messages")
        return self


class RuleConfig(Section):
    tool: str
    match: str = ""


class ActionRuleConfig(RuleConfig):
    action: Literal["allow", "deny", "ask"]


class ApproverConfig(Section):
    mode: Literal["pattern", "ask", "allow_all", "deny_all"] = "pattern"
    reason: str = ""
    default: Literal["", "allow", "deny"] = "deny"
    allow: list[RuleConfig] = Field(default_factory=list)
    deny: list[RuleConfig] = Field(default_factory=list)
    ask: list[RuleConfig] = Field(default_factory=list)
    rules: list[ActionRuleConfig] = Field(default_factory=list)
    owners: list[str] = Field(default_factory=list)
    approval_timeout: Duration = 300.0

    @field_validator("owners")
    @classmethod
    def _owners_are_chats(cls, owners: list[str]) -> list[str]:
        for owner in owners:
            transport, _, sender = owner.partition(":")
            if not transport or not sender:
                raise ValueError(f"{owner!r}: use TRANSPORT:SENDER, e.g. telegram:42")
        return owners


class SandboxLimitsConfig(Section):
    cpu_seconds: int = Field(default=60, ge=1)
    memory_mb: int = Field(default=1024, ge=16)
    processes: int = Field(default=256, ge=8)


class RecallConfig(Section):
    enabled: bool = True
    top_k: int = Field(default=5, ge=1)
    scope: Literal["sender", "all"] = "sender"


class AgentConfig(Section):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: int = Field(default=32, ge=0)
    workspace: str = "~/.local/share/rousseau/workspace"
    skills_dir: str = "~/.local/share/rousseau/skills"
    bash_timeout: Duration = 60.0
    sandbox: Literal["none", "bwrap"] = "none"
    sandbox_network: bool = False
    sandbox_limits: SandboxLimitsConfig = Field(default_factory=SandboxLimitsConfig)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    approver: ApproverConfig | None = None
    recall: RecallConfig = Field(default_factory=RecallConfig)


# -- daemon ---------------------------------------------------------------------------------


class LogConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"


class StateConfig(Section):
    path: str = "~/.local/share/rousseau/sessions.db"


class CronConfig(Section):
    poll_interval: Duration = 60.0
    timezone: str = "local"
    timeout: Duration = 300.0
    notify_failures: bool = True
    approver: ApproverConfig | None = None


class RateLimitConfig(Section):
    default: Rate = "20/1m"
    per_transport: dict[str, Rate] = Field(default_factory=dict)
    max_keys: int = Field(default=10000, ge=1)
    denied_reply: str = "You're sending messages faster than I can answer. Try again shortly."


class MCPServerConfig(Section):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _command_or_url(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command or url")
        return self


class HealthConfig(Section):
    listen: str = "127.0.0.1:9090"


# -- transports -----------------------------------------------------------------------------


class TransportConfig(Section):
    allowlist: list[SenderId] = Field(default_factory=list)
    policy: Policy = "allowlist"
    require_mention: bool = True
    reply_header: str = ""


class TelegramConfig(TransportConfig):
    token: SecretStr | None = None
    base_url: str | None = None


class SlackConfig(TransportConfig):
    app_token: SecretStr | None = None
    bot_token: SecretStr | None = None
    bot_user_id: str | None = None
    base_url: str | None = None


class DiscordConfig(TransportConfig):
    token: SecretStr | None = None
    api_base: str | None = None
    gateway_url: str | None = None


class MatrixConfig(TransportConfig):
    homeserver_url: str | None = None
    access_token: SecretStr | None = None
    password: SecretStr | None = None
    user_id: str | None = None
    device_id: str | None = None
    msgtype: Literal["m.text", "m.notice"] = "m.text"


class WhatsAppConfig(TransportConfig):
    store: str = "~/.local/share/rousseau/whatsapp.db"


class SignalConfig(TransportConfig):
    binary: str = "signal-cli"
    account: str | None = None
    extra_args: list[str] = Field(default_factory=list)


def _security(value: Any) -> Any:
    """`tls: true` is TLS from the first byte, `false` plain text; `starttls` upgrades."""
    if isinstance(value, bool) or value in ("true", "false"):
        return "tls" if value in (True, "true") else "plain"
    return value


class IMessageConfig(TransportConfig):
    base_url: str | None = None
    password: SecretStr | None = None
    poll_interval: Duration = 5.0
    private_api: bool = False
    mention_names: list[str] = Field(default_factory=lambda: ["rousseau"])


class EmailConfig(TransportConfig):
    imap_addr: str | None = None
    imap_username: str | None = None
    imap_password: SecretStr | None = None
    mailbox: str = "INBOX"
    poll_interval: Duration = 60.0
    idle: bool = True
    smtp_addr: str | None = None
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    from_: str | None = Field(default=None, alias="from")
    tls: Annotated[Literal["tls", "starttls", "plain"], BeforeValidator(_security)] = "tls"
    ca_file: str | None = None


class SMSWebhookConfig(Section):
    listen: str = "127.0.0.1:8088"
    path: str = "/sms/twilio"
    public_url: str | None = None


class SMSConfig(TransportConfig):
    provider: Literal["twilio", "vonage"] = "twilio"
    from_: str | None = Field(default=None, alias="from")
    account_sid: str | None = None
    auth_token: SecretStr | None = None
    api_key: str | None = None
    api_secret: SecretStr | None = None
    base_url: str | None = None
    status_timeout: Duration = 30.0
    webhook: SMSWebhookConfig | None = None


class Config(Section):
    """The whole configuration; every key optional."""

    provider: ProviderName | None = None
    anthropic: AnthropicConfig = Field(default_factory=AnthropicConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    openrouter: OpenRouterConfig = Field(default_factory=OpenRouterConfig)
    ollama: OllamaConfig = Field(default_factory=OllamaConfig)
    bedrock: BedrockConfig = Field(default_factory=BedrockConfig)
    vertex: VertexConfig = Field(default_factory=VertexConfig)
    claudecli: ClaudeCLIConfig = Field(default_factory=ClaudeCLIConfig)
    fallback: list[ProviderName] = Field(default_factory=list)
    log: LogConfig = Field(default_factory=LogConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    shutdown_grace: Duration = 30.0
    max_concurrent_turns: int = Field(default=64, ge=1)
    cron: CronConfig = Field(default_factory=CronConfig)
    ratelimit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict)
    health: HealthConfig | None = None
    telegram: TelegramConfig | None = None
    slack: SlackConfig | None = None
    discord: DiscordConfig | None = None
    matrix: MatrixConfig | None = None
    whatsapp: WhatsAppConfig | None = None
    signal: SignalConfig | None = None
    imessage: IMessageConfig | None = None
    email: EmailConfig | None = None
    sms: SMSConfig | None = None

    source: str = Field(default="", exclude=True)
    """Where the file came from (empty when only defaults and environment were used)."""

    def secrets(self) -> list[str]:
        """Every secret value set anywhere, for scrubbing tool environments and logs."""
        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, SecretStr):
                found.append(node.get_secret_value())
            elif isinstance(node, BaseModel):
                for name in type(node).model_fields:
                    walk(getattr(node, name))
            elif isinstance(node, dict):
                for v in node.values():
                    walk(v)

        walk(self)
        return [s for s in found if s]


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
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, file if file.exists() else None, origins)) from None
    config.source = str(file) if file.exists() else ""
    return config


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


def _describe(exc: ValidationError, file: Path | None, origins: dict[tuple[str, ...], str]) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        loc = tuple(p for p in loc if p not in ("str", "int", "float", "bool"))
        path = ".".join(loc) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        var = next((v for k, v in origins.items() if loc[: len(k)] == k), None)
        lines.append(f"{path}: {msg}" + (f" (from {var})" if var else ""))
    prefix = f"{file}: " if file is not None else ""
    return prefix + "; ".join(lines)


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
        if key == "source" and model is Config:
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
