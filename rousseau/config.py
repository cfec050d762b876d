"""Typed configuration: a YAML file, then well-known secret variables, then ROUSSEAU_* overrides.

Every mistake becomes a ConfigError naming the key path, e.g.
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
from typing import Annotated, Any, Literal

import structlog
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from rousseau.agent.errors import ConfigError
from rousseau.messages import DEFAULT_AGENT

DEFAULT_PATH = "~/.config/rousseau/config.yaml"
DEFAULT_SYSTEM_PROMPT = (
    "You are rousseau, a capable personal assistant reached through chat. Answer plainly and "
    "briefly. Use your tools when they help; say what you did."
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")


def parse_duration(value: Any) -> float:
    """`90s`, `5m`, `1h30m`, `250ms`, `30d` or plain seconds, as seconds."""
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
            scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
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
    # The string under each field documents it (docgen reads those from the source: having
    # pydantic read them too, at every start, would cost a fifth of this module's import).
    # defer_build: Config's validator, built at the first load, holds every section's; each
    # section compiling its own as well at import cost start-up time and memory for nothing.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


# -- providers ------------------------------------------------------------------------------


class AnthropicConfig(Section):
    api_key: SecretStr | None = None
    """The Anthropic API key (or ANTHROPIC_API_KEY)."""
    model: str = "claude-sonnet-4-5"
    """The model that answers."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An API address to use instead of Anthropic's own (a proxy or gateway)."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class OpenAIConfig(Section):
    api_key: SecretStr | None = None
    """The API key (or OPENAI_API_KEY, or OPENROUTER_API_KEY for openrouter; Ollama needs none)."""
    model: str = "gpt-4.1-mini"
    """The model that answers."""
    base_url: str | None = None
    """An OpenAI-compatible chat-completions server to use instead of OpenAI's own."""
    max_tokens: int = Field(default=4096, ge=1)
    """The most tokens one reply may use."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class OpenRouterConfig(OpenAIConfig):
    model: str = "anthropic/claude-sonnet-4.5"
    """The model that answers, as OpenRouter names it."""
    base_url: str | None = "https://openrouter.ai/api/v1"
    """The OpenRouter API address."""


class OllamaConfig(OpenAIConfig):
    model: str = "llama3.2"
    """The model that answers, as Ollama names it."""
    base_url: str | None = "http://localhost:11434/v1"
    """The address of Ollama's OpenAI-compatible API."""


class BedrockConfig(Section):
    region: str | None = None
    """The AWS region (or AWS_REGION)."""
    model: str = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    """The Bedrock model id that answers."""
    profile: str | None = None
    """An AWS profile name to take credentials from (or AWS_PROFILE)."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An endpoint to use instead of the region's bedrock-runtime address."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class VertexConfig(Section):
    project: str | None = None
    """The Google Cloud project; unset, the project the credentials name."""
    region: str | None = None
    """The Vertex AI region, e.g. us-east5, or global."""
    model: str = "claude-sonnet-4-5@20250929"
    """The Vertex AI model id that answers."""
    credentials_file: str | None = None
    """A Google credentials file (or GOOGLE_APPLICATION_CREDENTIALS, or gcloud's ADC)."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An endpoint to use instead of the region's aiplatform.googleapis.com address."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class ClaudeCLIConfig(Section):
    binary: str = "claude"
    """The Claude Code CLI to run, as a command name or path."""
    model: str = ""
    """The model passed as --model; empty leaves the choice to the CLI."""
    permission_mode: str = "default"
    """The CLI's --permission-mode; empty passes none."""
    extra_args: list[str] = Field(default_factory=list)
    """Further arguments added to every CLI invocation."""


# -- agent ----------------------------------------------------------------------------------


class CompressionConfig(Section):
    enabled: bool = False
    """Fold long sessions into a summary."""
    trigger_messages: int = Field(default=60, ge=2)
    """Compress once a session has more messages than this."""
    keep_recent: int = Field(default=8, ge=1)
    """Messages kept verbatim after the summary."""
    prompt: str = ""
    """Instructions for the summariser; empty uses the built-in ones."""

    @model_validator(mode="after")
    def _keep_fewer_than_trigger(self) -> CompressionConfig:
        if self.keep_recent >= self.trigger_messages:
            raise ValueError("keep_recent must be smaller than trigger_messages")
        return self


class RuleConfig(Section):
    tool: str
    """The tool the rule applies to, or * for any tool."""
    match: str = ""
    """A regex searched for in the call's compact input JSON; empty matches every call. For
    bash, an allow rule is matched against each part of the parsed command line (each simple
    command, substitution and file redirection) and allows it only when every part matches
    some allow rule; deny and ask rules also see the raw JSON."""


class ActionRuleConfig(RuleConfig):
    action: Literal["allow", "deny", "ask"]
    """What a matching call gets: allow, deny, or ask a person."""


class ApproverConfig(Section):
    mode: Literal["pattern", "ask", "allow_all", "deny_all"] = "pattern"
    """pattern: the rules decide; ask: a person settles what no rule does; allow_all; deny_all."""
    reason: str = ""
    """Text the model sees when a call is denied."""
    default: Literal["", "allow", "deny"] = "deny"
    """What calls no rule matches get: allow or deny (empty means deny)."""
    allow: list[RuleConfig] = Field(default_factory=list)
    """Rules for calls that may run."""
    deny: list[RuleConfig] = Field(default_factory=list)
    """Rules for calls that are refused; deny wins over ask, ask over allow."""
    ask: list[RuleConfig] = Field(default_factory=list)
    """Rules for calls a person decides (in chat, the owners answer yes/no ID)."""
    rules: list[ActionRuleConfig] = Field(default_factory=list)
    """Rules in one list, each with its own action: allow, deny or ask."""
    owners: list[str] = Field(default_factory=list)
    """Who answers approval requests, as transport:sender; empty means whoever asked."""
    approval_timeout: Duration = 300.0
    """How long to wait for an answer before the call is denied."""

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
    """CPU time per process, in seconds."""
    memory_mb: int = Field(default=1024, ge=16)
    """Address space per process, in megabytes."""
    processes: int = Field(default=256, ge=8)
    """Processes at once (a pids cgroup, or RLIMIT_NPROC)."""


class RecallConfig(Section):
    enabled: bool = True
    """Add snippets from earlier sessions about the newest message to the prompt."""
    top_k: int = Field(default=5, ge=1)
    """The most snippets added at once."""
    scope: Literal["sender", "all"] = "sender"
    """Which earlier sessions are searched: the same sender's (sender) or everyone's (all)."""


class AgentConfig(Section):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The instructions the model is given on every turn."""
    max_iterations: int = Field(default=32, ge=0)
    """Model calls per turn; 0 means the built-in limit."""
    workspace: str = "~/.local/share/rousseau/workspace"
    """The only folder tools may touch."""
    skills_dir: str = "~/.local/share/rousseau/skills"
    """The folder of skills, markdown files that join the prompt on turns that mention them."""
    bash_timeout: Duration = 60.0
    """The bash tool's timeout when a call names none; a call may ask for up to 1h."""
    bash_env: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = []
    """Environment variables bash gets although they look like credentials (by name, or a
    value holding a configured secret, a URL with a password or a known key's shape); the
    rest of those are removed."""
    turn_timeout: Duration = 600.0
    """The longest a turn may take in the daemon (the user is told when it is cut off); time
    spent waiting for a human's approval counts too."""
    sandbox: Literal["none", "bwrap"] = "none"
    """none: bash runs as the daemon's user; bwrap: only the workspace is writable."""
    sandbox_network: bool = False
    """With bwrap, whether commands may use the network."""
    sandbox_limits: SandboxLimitsConfig = Field(default_factory=SandboxLimitsConfig)
    """Resource limits per command, with bwrap."""
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    """Folding long sessions into a summary."""
    history_messages: int = Field(default=100, ge=0)
    """The most messages of a session the model is shown: past it, the older half are left
    out of the requests that follow (the state file keeps them). 0: every message."""
    approver: ApproverConfig | None = None
    """The tool-call policy; unset, read and grep run and everything else is refused."""
    recall: RecallConfig = Field(default_factory=RecallConfig)
    """Snippets from earlier sessions added to the prompt."""
    provider: ProviderName | None = None
    """In `agents:`, this agent's model backend; unset: the top-level provider."""
    model: str | None = None
    """In `agents:`, the model this agent asks its provider for; unset: the provider's own
    model setting."""
    tools: list[str] | None = None
    """The tools this agent has, by name or glob (e.g. [read, grep, "github__*"]); unset:
    all of them."""
    max_concurrent_turns: int | None = Field(default=None, ge=1)
    """This agent's turns running at once, within the daemon's max_concurrent_turns; unset:
    no limit of its own."""


class RouteConfig(Section):
    agent: str
    """The agent that answers what this route matches."""
    transport: str = "*"
    """The transport, by name (telegram, slack...); a glob pattern."""
    chat: str = "*"
    """The chat (or group, channel, room) id as the platform gives it; a glob pattern."""
    sender: str = "*"
    """The sender id as the platform gives it; a glob pattern."""
    thread: str = "*"
    """The thread id, where the platform has threads; a glob pattern."""


# -- daemon ---------------------------------------------------------------------------------


class LogConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe messages logged: debug, info, warning or error."""
    format: Literal["text", "json"] = "text"
    """Log lines as text or json."""


class RetentionConfig(Section):
    inbox: Duration = 30 * 86400.0
    """How long an answered message's id is remembered to drop a redelivery (platforms
    redeliver within hours; keep this at days)."""
    outbox: Duration = 7 * 86400.0
    """How long a sent (or abandoned) reply's row is kept."""
    audit: Duration = 90 * 86400.0
    """How long the audit trail of tool calls is kept."""
    cron_runs: Duration = 30 * 86400.0
    """How long the record of each cron run is kept."""
    compacted: Duration | None = None
    """How long messages a session's summary replaced (out of the model's context, still
    found by recall) are kept; unset keeps them for good. The live conversation and the
    summary are never pruned."""
    interval: Duration = 3600.0
    """How often the sweep runs (the first one soon after start)."""


class StateConfig(Section):
    path: str = "~/.local/share/rousseau/sessions.db"
    """The SQLite database holding sessions, cron jobs and the rest of the daemon's state."""
    url: SecretStr | None = None
    """A PostgreSQL database instead (postgresql://user:password@host/db, or
    ROUSSEAU_STATE_URL), which several daemons may share; needs rousseau[postgres]."""
    lease: Duration = 15.0
    """With url: how long a daemon may go silent before the others take over its work."""

    @field_validator("url")
    @classmethod
    def _postgres(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not url.get_secret_value().startswith(
            ("postgresql://", "postgres://")
        ):
            raise ValueError("a PostgreSQL URL, postgresql://user:password@host:port/database")
        return url

    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    """What is pruned, and when; sessions and their live messages are never pruned."""
    media_dir: str = ""
    """Where attachments' bytes are kept, by content; empty: a media folder beside path."""

    def media_folder(self) -> Path:
        if self.media_dir:
            return Path(self.media_dir).expanduser()
        return Path(self.path).expanduser().parent / "media"


def _media_types() -> list[str]:
    from rousseau.media import DEFAULT_TYPES

    return list(DEFAULT_TYPES)


class TranscriptionConfig(Section):
    base_url: str
    """An OpenAI-compatible server with /audio/transcriptions: https://api.openai.com/v1,
    https://api.groq.com/openai/v1, or a local whisper server."""
    api_key: SecretStr | None = None
    """Its key, if it needs one."""
    model: str = "whisper-1"
    """The speech-to-text model."""
    timeout: Duration = 120.0
    """The longest one transcription may take."""


class MediaConfig(Section):
    max_bytes: int = Field(default=20_000_000, ge=1)
    """The largest attachment taken in, and the most one message's attachments may weigh
    together; past it the sender gets a polite reply and the model is not called."""
    types: list[str] = Field(default_factory=_media_types)
    """Media types taken in (type/* patterns allowed); no SVG or HTML by default."""
    transcription: TranscriptionConfig | None = None
    """Where voice notes are turned into text; unset, the model is told one was sent."""


class CronConfig(Section):
    poll_interval: Duration = 60.0
    """How often the job table is re-read (so CLI changes take effect)."""
    timezone: str = "local"
    """The time zone for schedules without CRON_TZ=: an IANA name or local."""
    timeout: Duration = 300.0
    """The longest a job's turn may take."""
    notify_failures: bool = True
    """Send a one-line notice to a failed job's target."""
    approver: ApproverConfig | None = None
    """A policy of its own for cron turns; unset, agent.approver with asking calls denied."""


class RateLimitConfig(Section):
    default: Rate = "20/1m"
    """Messages allowed per sender, as COUNT/PERIOD."""
    per_transport: dict[str, Rate] = Field(default_factory=dict)
    """Rates for particular transports in place of the default, e.g. {telegram: 5/1m}."""
    max_keys: int = Field(default=10000, ge=1)
    """Senders tracked at once (the least recently seen are dropped)."""
    denied_reply: str = "You're sending messages faster than I can answer. Try again shortly."
    """The reply a sender gets on going over the limit."""


class MCPServerConfig(Section):
    command: str | None = None
    """The program to start for a stdio server (set this or url)."""
    args: list[str] = Field(default_factory=list)
    """Arguments for command."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for command."""
    url: str | None = None
    """The address of an HTTP server (set this or command)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent to url, e.g. Authorization."""

    @model_validator(mode="after")
    def _command_or_url(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command or url")
        return self


class HealthConfig(Section):
    listen: str = "127.0.0.1:9090"
    """The host:port serving /healthz and /metrics."""

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, listen: str) -> str:
        host, colon, port = listen.rpartition(":")
        if not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{listen!r} is not host:port (e.g. 127.0.0.1:9090)")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError(f"{listen!r}: an IPv6 host goes in brackets, e.g. [::1]:9090")
        return listen

    @property
    def address(self) -> tuple[str, int]:
        """The host to bind (an IPv6 host without its brackets; 127.0.0.1 when left empty)
        and the port."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


class WebKeyConfig(Section):
    key: SecretStr
    """The bearer key a client sends (`Authorization: Bearer KEY`); at least 24 characters."""
    owner: str
    """Whose key it is: its conversations are this owner's, apart from every other key's."""
    agent: str | None = None
    """The agent it talks to (unset: `default_agent`); `GET /v1/models` lists it."""

    @field_validator("key")
    @classmethod
    def _long_enough(cls, key: SecretStr) -> SecretStr:
        if len(key.get_secret_value()) < 24:
            raise ValueError("a key needs at least 24 characters (rousseau web key makes one)")
        return key

    @field_validator("owner")
    @classmethod
    def _plain_owner(cls, owner: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", owner):
            raise ValueError(f"{owner!r}: letters, digits, _ . @ and - only")
        return owner


class WebConfig(HealthConfig):
    listen: str = "127.0.0.1:8080"
    """The host:port of the web face: dashboard, web chat, the OpenAI-compatible API, and
    /healthz and /metrics."""
    password_hash: SecretStr | None = None
    """The owner's password, hashed (`rousseau web password` makes it); unset: log in by
    a one-time link from `rousseau web link` only."""
    public_url: str = ""
    """The address people open (behind a proxy, https://...); `rousseau web link` prints
    links to it. Cookies are marked Secure when it, or the proxy, says https."""
    chat_users: dict[str, SecretStr] = Field(default_factory=dict)
    """More people who may use the web chat (not the dashboard): name -> password hash."""
    api_keys: list[WebKeyConfig] = Field(default_factory=list)
    """Keys for the OpenAI-compatible API under /v1."""
    session_ttl: Duration = 43200.0
    """How long a login lasts without use."""


# -- transports -----------------------------------------------------------------------------


class TransportConfig(Section):
    allowlist: list[SenderId] = Field(default_factory=list)
    """Senders admitted, as the platform's own sender ids."""
    policy: Policy = "allowlist"
    """Who may talk: allowlist only, pairing (strangers get a code to approve) or open."""
    require_mention: bool = True
    """In groups, answer only when mentioned or replied to."""
    reply_header: str = ""
    """Text put at the start of every reply."""
    streaming: Literal["off", "edit", "native"] = "edit"
    """Show a reply in the chat as it is written, by editing one message (where the platform
    allows edits: Telegram, Slack, Discord, Matrix); `native` uses Telegram's drafts in
    private chats and Slack's streaming methods in threads (edits elsewhere, or where the
    workspace refuses them); `off` sends it whole when done."""
    progress: Literal["off", "tools"] | None = None
    """While tools run, the streamed message says what they do (`tools`); unset: in direct
    chats but not in groups."""
    ack_reaction: str = ""
    """A reaction put on each message the bot takes in, so the sender knows it arrived
    before the answer starts (Telegram, Discord, Matrix: the emoji, e.g. 👀; Slack: its
    name, e.g. eyes); empty: none."""
    agent: str | None = None
    """The agent (of `agents:`) answering this transport's chats that no route names;
    unset: `default_agent`."""


class TelegramWebhookConfig(Section):
    url: str
    """The public HTTPS address Telegram posts updates to: a reverse proxy or load balancer
    in front of the daemons."""
    listen: str = "127.0.0.1:8443"
    """Where this daemon takes the posts (host:port)."""
    secret: SecretStr | None = None
    """Checked on every post (letters, digits, _ and -); unset: one made from the token."""


class TelegramConfig(TransportConfig):
    token: SecretStr | None = None
    """The bot token from @BotFather (or TELEGRAM_BOT_TOKEN)."""
    base_url: str | None = None
    """A local Bot API server to use instead of Telegram's own."""
    webhook: TelegramWebhookConfig | None = None
    """Updates posted to the daemon instead of long polling; several daemons behind one
    load balancer then all take them."""


class SlackConfig(TransportConfig):
    app_token: SecretStr | None = None
    """The app-level token, xapp-... (or SLACK_APP_TOKEN)."""
    bot_token: SecretStr | None = None
    """The bot token, xoxb-... (or SLACK_BOT_TOKEN)."""
    bot_user_id: str | None = None
    """The bot's own user id; unset, it is looked up on connecting."""
    base_url: str | None = None
    """A Web API address to use instead of Slack's own (a proxy or test server)."""


class DiscordConfig(TransportConfig):
    token: SecretStr | None = None
    """The bot token (or DISCORD_TOKEN or DISCORD_BOT_TOKEN)."""
    api_base: str | None = None
    """Replaces discord.py's REST base address (proxies, tests)."""
    gateway_url: str | None = None
    """Replaces discord.py's gateway address."""


class MatrixConfig(TransportConfig):
    homeserver_url: str | None = None
    """The homeserver's address."""
    access_token: SecretStr | None = None
    """The bot's access token, used instead of password (or MATRIX_ACCESS_TOKEN)."""
    password: SecretStr | None = None
    """The bot's password, to log in when there is no access token (or MATRIX_PASSWORD)."""
    user_id: str | None = None
    """The bot's user id, e.g. @bot:example.org."""
    device_id: str | None = None
    """With access_token, the device it belongs to."""
    msgtype: Literal["m.text", "m.notice"] = "m.text"
    """The message type replies are sent as: m.text or m.notice."""


class WhatsAppConfig(TransportConfig):
    store: str = "~/.local/share/rousseau/whatsapp.db"
    """The SQLite file that keeps the WhatsApp session (pair it with `rousseau whatsapp login`)."""


class SignalConfig(TransportConfig):
    binary: str = "signal-cli"
    """The signal-cli program to run, as a command name or path."""
    account: str | None = None
    """The bot's registered number, e.g. +15551234567."""
    extra_args: list[str] = Field(default_factory=list)
    """Further signal-cli arguments, put before jsonRpc."""


def _security(value: Any) -> Any:
    """`tls: true` is TLS from the first byte, `false` plain text; `starttls` upgrades."""
    if isinstance(value, bool) or value in ("true", "false"):
        return "tls" if value in (True, "true") else "plain"
    return value


class IMessageConfig(TransportConfig):
    base_url: str | None = None
    """The BlueBubbles server's address, e.g. http://mac.local:1234."""
    password: SecretStr | None = None
    """The BlueBubbles server password (or BLUEBUBBLES_PASSWORD)."""
    poll_interval: Duration = 5.0
    """How often the server is asked for new messages."""
    private_api: bool = False
    """The server's Private API is on: typing indicators, faster sends."""
    mention_names: list[str] = Field(default_factory=lambda: ["rousseau"])
    """In group chats, answer only when one of these names is written."""


class EmailConfig(TransportConfig):
    imap_addr: str | None = None
    """The IMAP server as host:port (port defaults to 993, or 143 with starttls or plain)."""
    imap_username: str | None = None
    """The IMAP login name."""
    imap_password: SecretStr | None = None
    """The IMAP password (or EMAIL_IMAP_PASSWORD)."""
    mailbox: str = "INBOX"
    """The IMAP folder read for new mail."""
    poll_interval: Duration = 60.0
    """The time between polls, and the longest wait in one IDLE."""
    idle: bool = True
    """Use IMAP IDLE when the server has it."""
    smtp_addr: str | None = None
    """The SMTP server as host:port (port defaults to 465, 587 or 25, following tls)."""
    smtp_username: str | None = None
    """The SMTP login name; unset, imap_username."""
    smtp_password: SecretStr | None = None
    """The SMTP password (or EMAIL_SMTP_PASSWORD); unset, imap_password."""
    from_: str | None = Field(default=None, alias="from")
    """The bot's address; unset, imap_username."""
    tls: Annotated[Literal["tls", "starttls", "plain"], BeforeValidator(_security)] = "tls"
    """true (TLS), starttls, or false (plain text, for local servers only)."""
    ca_file: str | None = None
    """A CA bundle to trust, for a self-signed server."""


class SMSWebhookConfig(Section):
    listen: str = "127.0.0.1:8088"
    """The host:port that receives Twilio's webhook calls."""
    path: str = "/sms/twilio"
    """The URL path Twilio posts inbound messages to."""
    public_url: str | None = None
    """The address Twilio calls, used to check its signature."""


class SMSConfig(TransportConfig):
    provider: Literal["twilio", "vonage"] = "twilio"
    """The SMS provider: twilio or vonage."""
    from_: str | None = Field(default=None, alias="from")
    """The sending number (or Vonage sender id)."""
    account_sid: str | None = None
    """The Twilio account SID."""
    auth_token: SecretStr | None = None
    """The Twilio auth token (or TWILIO_AUTH_TOKEN)."""
    api_key: str | None = None
    """The Vonage API key."""
    api_secret: SecretStr | None = None
    """The Vonage API secret (or VONAGE_API_SECRET)."""
    base_url: str | None = None
    """The provider's API address, to use instead of the real one (a local fake, a proxy)."""
    status_timeout: Duration = 30.0
    """How long to wait for Twilio to report a sent message."""
    webhook: SMSWebhookConfig | None = None
    """Inbound SMS from Twilio; unset, the transport only sends."""


AGENT_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class Config(Section):
    """The whole configuration; every key optional."""

    provider: ProviderName | None = None
    """The model backend; unset: the first usable of anthropic, openai, claudecli, ollama."""
    anthropic: AnthropicConfig = Field(default_factory=AnthropicConfig)
    """The Anthropic API."""
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    """OpenAI, or any OpenAI-compatible chat-completions server."""
    openrouter: OpenRouterConfig = Field(default_factory=OpenRouterConfig)
    """OpenRouter, with the same keys as openai."""
    ollama: OllamaConfig = Field(default_factory=OllamaConfig)
    """A local Ollama, with the same keys as openai."""
    bedrock: BedrockConfig = Field(default_factory=BedrockConfig)
    """Claude on AWS Bedrock (credentials from the usual AWS sources)."""
    vertex: VertexConfig = Field(default_factory=VertexConfig)
    """Claude on Google Vertex AI."""
    claudecli: ClaudeCLIConfig = Field(default_factory=ClaudeCLIConfig)
    """The Claude Code CLI as a subprocess."""
    fallback: list[ProviderName] = Field(default_factory=list)
    """Providers tried in order when the primary fails after its retries."""
    log: LogConfig = Field(default_factory=LogConfig)
    """Logging."""
    state: StateConfig = Field(default_factory=StateConfig)
    """Where sessions and other state are kept."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent: its prompt, tools, sandbox and approval policy. With `agents:`, the agent
    named `default`, and what the others inherit."""
    agents: dict[Annotated[str, StringConstraints(pattern=AGENT_NAME)], AgentConfig] = Field(
        default_factory=dict
    )
    """More agents, by name, each with keys of `agent:`; a key an agent leaves unset is the
    one `agent:` has (see the "Agents and routing" page)."""
    routes: list[RouteConfig] = Field(default_factory=list)
    """Which agent answers which chats: the first route whose patterns all match decides."""
    default_agent: str = DEFAULT_AGENT
    """The agent answering chats no route and no transport's `agent` names."""
    shutdown_grace: Duration = 30.0
    """On SIGTERM, how long in-flight turns get to finish."""
    max_concurrent_turns: int = Field(default=64, ge=1)
    """Turns of different sessions running at once (a turn waiting for a human's approval
    does not count)."""
    send_timeout: Duration = 60.0
    """The longest one send to a platform may take before it is abandoned and retried later
    (other chats are never held up by it)."""
    media: MediaConfig = Field(default_factory=MediaConfig)
    """Attachments: how large, and of which types."""
    cron: CronConfig = Field(default_factory=CronConfig)
    """Scheduled jobs, which live in the store (see `rousseau cron --help`)."""
    ratelimit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    """Limits on how fast each sender may send messages."""
    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict)
    """External MCP servers by name, whose tools the agent may call as SERVER__TOOL."""
    health: HealthConfig | None = None
    """HTTP /healthz and /metrics; off unless set."""
    web: WebConfig | None = None
    """The web face (dashboard, web chat, OpenAI-compatible API); off unless set."""
    telegram: TelegramConfig | None = None
    """The Telegram transport, configured when present with its credentials."""
    slack: SlackConfig | None = None
    """The Slack transport (Socket Mode), configured when present with its credentials."""
    discord: DiscordConfig | None = None
    """The Discord transport, configured when present with its credentials."""
    matrix: MatrixConfig | None = None
    """The Matrix transport, configured when present with its credentials."""
    whatsapp: WhatsAppConfig | None = None
    """The WhatsApp transport, configured when present."""
    signal: SignalConfig | None = None
    """The Signal transport through signal-cli, configured when present with its account."""
    imessage: IMessageConfig | None = None
    """The iMessage transport through a BlueBubbles server's REST API."""
    email: EmailConfig | None = None
    """The email transport over IMAP and SMTP; give it a mailbox of its own (it marks mail seen)."""
    sms: SMSConfig | None = None
    """The SMS transport, send-only unless webhook is set (Twilio only)."""

    source: str = Field(default="", exclude=True)
    """Where the file came from (empty when only defaults and environment were used)."""
    _notices: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def notices(self) -> dict[str, str]:
        """Keys written for rousseau-agent (Go) that were accepted, each with what rousseau
        does instead; `log_notices` reports them once logging is set up."""
        return self._notices

    @model_validator(mode="before")
    @classmethod
    def _agents_inherit(cls, data: Any) -> Any:
        """Each of `agents:` starts from `agent:`; its own keys replace those."""
        if isinstance(data, dict) and isinstance(data.get("agents"), dict):
            base = data.get("agent") or {}
            if isinstance(base, dict):
                agents = {
                    name: {**base, **agent} if isinstance(agent, dict) else agent
                    for name, agent in data["agents"].items()
                }
                data = {**data, "agents": agents}
        return data

    @model_validator(mode="after")
    def _agents_named_exist(self) -> Config:
        named = [("default_agent", self.default_agent)]
        named += [(f"routes[{i}].agent", r.agent) for i, r in enumerate(self.routes)]
        named += [
            (f"{name}.agent", section.agent)
            for name in type(self).model_fields
            if isinstance(section := getattr(self, name), TransportConfig)
            and section.agent is not None
        ]
        for key, name in named:
            if (why := self.unknown_agent(name)) is not None:
                raise ValueError(f"{key}: {why}")
        return self

    def unknown_agent(self, name: str) -> str | None:
        """Why `name` is not one of this configuration's agents; None when it is."""
        known = {DEFAULT_AGENT, *self.agents}
        if name in known:
            return None
        return f"no agent named {name!r} (there are: {', '.join(sorted(known))})"

    def for_agent(self, name: str, detected: str | None = None) -> Config:
        """The configuration as agent `name` runs with it: its section as `agent:`, its
        provider and model in place of the top-level ones. `detected`: the provider used
        when none is configured (detect_provider's choice), whose model an agent may set."""
        if name == DEFAULT_AGENT and name not in self.agents:
            return self
        agent = self.agents[name]
        update: dict[str, Any] = {"agent": agent}
        provider = agent.provider or self.provider or detected
        if agent.provider is not None:
            update["provider"] = agent.provider
        if agent.model is not None and provider is not None:
            update[provider] = getattr(self, provider).model_copy(update={"model": agent.model})
        return self.model_copy(update=update)

    def own_provider(self, name: str) -> bool:
        """Whether agent `name` names a provider or model of its own."""
        agent = self.agents.get(name)
        return agent is not None and (agent.provider is not None or agent.model is not None)

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
    from rousseau.config_go import translate_go_keys

    go = translate_go_keys(data)
    origins = go.moved | origins
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, file if file.exists() else None, origins)) from None
    config.source = str(file) if file.exists() else ""
    config.notices.update(go.notices)
    return config


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


def _describe(exc: ValidationError, file: Path | None, origins: dict[tuple[str, ...], str]) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        loc = tuple(p for p in loc if p not in ("str", "int", "float", "bool"))
        path = ".".join(loc) or "(top level)"
        msg = _unknown_key(loc) if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        var = next((v for k, v in origins.items() if loc[: len(k)] == k), None)
        lines.append(f"{path}: {msg}" + (f" (from {var})" if var else ""))
    prefix = f"{file}: " if file is not None else ""
    return prefix + "; ".join(lines)


def _unknown_key(loc: tuple[str, ...]) -> str:
    """The words "unknown key", with the nearest key of its section when one is close."""
    model: type[BaseModel] | None = Config
    for part in loc[:-1]:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:  # a list index or a mapping's own key: the model stays
            continue
        model = _model_of(field.annotation)
    if model is None or not loc:
        return "unknown key"
    keys = [f.alias or name for name, f in model.model_fields.items() if name != "source"]
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
