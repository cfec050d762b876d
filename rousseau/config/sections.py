"""The sections of the agent and the daemon: prompt, tools, approval rules and routes; logs,
state, media, cron, rate limits, MCP servers, health and the web face.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, StringConstraints, field_validator, model_validator

from rousseau.config.base import Duration, ProviderName, Rate, Section

DEFAULT_SYSTEM_PROMPT = (
    "You are rousseau, a capable personal assistant reached through chat. Answer plainly and "
    "briefly. Use your tools when they help; say what you did."
)


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


class MemoryConfig(Section):
    enabled: bool = True
    """Keep a profile of each person the agent talks to (the memory tool; /memory and
    /forget in chat)."""
    max_chars: int = Field(default=2000, ge=100, le=20_000)
    """The most characters one person's profile holds, all its entries together."""


class EmbeddingsConfig(Section):
    base_url: str
    """An OpenAI-compatible API's address, whose /embeddings turns text into vectors: OpenAI
    (https://api.openai.com/v1), Ollama (http://localhost:11434/v1), a local server."""
    api_key: SecretStr | None = None
    """Its key, if it asks for one."""
    model: str
    """The embedding model (e.g. text-embedding-3-small, nomic-embed-text). Naming another
    later embeds the history again: vectors of two models do not mix."""
    dimensions: int | None = Field(default=None, ge=1, le=16_000)
    """The vectors' width, for models that can shorten theirs (OpenAI's text-embedding-3);
    unset, the model's own."""
    batch_size: int = Field(default=64, ge=1, le=2048)
    """Messages embedded in one request by the background indexer."""
    timeout: Duration = 30.0
    """The longest one request may take (a turn's recall waits at most 5 s of it, then
    recalls by keywords alone)."""

    @field_validator("base_url")
    @classmethod
    def _address(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// address")
        return value


class DelegationConfig(Section):
    agents: list[str] = Field(default_factory=list)
    """The agents (of `agents:`) the delegate tool may hand a task to; a task naming none
    goes to a fresh sub-agent with some of the caller's tools."""
    max_children: int = Field(default=4, ge=1, le=32)
    """Sub-agents of one turn running at once; more wait for a free place."""
    max_depth: int = Field(default=2, ge=1, le=8)
    """How deep sub-agents may nest (1: a sub-agent cannot delegate in turn)."""


_HOURS = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")


class HeartbeatConfig(Section):
    every: Duration = 1800.0
    """How often the agent looks whether something needs saying (at least a minute)."""
    prompt: str = (
        "This is a scheduled check-in, not a message from the person. Look at HEARTBEAT.md"
        " (if given below) and what you know: is anything due or worth telling them now?"
        " If so, write it briefly. If nothing needs their attention, answer exactly NOTHING."
    )
    """What the heartbeat's turn is asked; HEARTBEAT.md in the agent's workspace follows."""
    deliver_to: str
    """`transport:chat` where what the heartbeat finds is sent."""
    active_hours: str = "00:00-24:00"
    """`HH:MM-HH:MM` in cron.timezone: heartbeats only run inside it (it may span midnight,
    22:00-06:00)."""

    @field_validator("every")
    @classmethod
    def _not_too_often(cls, value: float) -> float:
        if value < 60:
            raise ValueError("at least 1m")
        return value

    @field_validator("deliver_to")
    @classmethod
    def _target(cls, value: str) -> str:
        transport, _, chat = value.partition(":")
        if not transport or not chat:
            raise ValueError(f"{value!r} is not transport:chat (e.g. telegram:12345)")
        return value

    @field_validator("active_hours")
    @classmethod
    def _hours(cls, value: str) -> str:
        value = value.replace(" ", "")
        if _HOURS.match(value) is None:
            raise ValueError(f"{value!r} is not HH:MM-HH:MM (e.g. 08:00-22:00)")
        return value


class BudgetConfig(Section):
    daily_usd: float | None = Field(default=None, ge=0)
    """The most this agent may spend on models in a day (in cron.timezone)."""
    monthly_usd: float | None = Field(default=None, ge=0)
    """The most it may spend in a calendar month."""
    daily_tokens: int | None = Field(default=None, ge=0)
    """The most tokens (input, output and cache together) it may use in a day."""
    per_sender_daily_usd: float | None = Field(default=None, ge=0)
    """The most one person's messages may cost in a day."""


_MODEL_REF = r"^[A-Za-z0-9_.:/@+-]+$"


class ModelsConfig(Section):
    compaction: Annotated[str, StringConstraints(pattern=_MODEL_REF)] | None = None
    """`provider:model` (or a model of the agent's own provider) that writes summaries."""
    vision: Annotated[str, StringConstraints(pattern=_MODEL_REF)] | None = None
    """The model asked instead when a request carries an image."""
    heartbeat: Annotated[str, StringConstraints(pattern=_MODEL_REF)] | None = None
    """The model of heartbeat turns."""
    cron: Annotated[str, StringConstraints(pattern=_MODEL_REF)] | None = None
    """The model of cron jobs' turns."""
    delegation: Annotated[str, StringConstraints(pattern=_MODEL_REF)] | None = None
    """The model of fresh sub-agents (an agent named in delegation.agents keeps its own)."""


class PriceConfig(Section):
    input: float = Field(ge=0)
    """USD per million input tokens."""
    output: float = Field(ge=0)
    """USD per million output tokens."""
    cache_read: float | None = Field(default=None, ge=0)
    """USD per million tokens read from the prompt cache; unset: a tenth of input."""
    cache_write: float | None = Field(default=None, ge=0)
    """USD per million tokens written to the prompt cache; unset: 1.25 times input."""


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
    bash_env: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list
    )
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
    """The tool-call policy; unset, read, grep and memory run and everything else is refused."""
    recall: RecallConfig = Field(default_factory=RecallConfig)
    """Snippets from earlier sessions added to the prompt."""
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    """A profile of each person, kept by the agent and shown to it on every turn."""
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
    delegation: DelegationConfig | None = None
    """The delegate tool: handing tasks to other agents or to sub-agents; unset: no delegate
    tool."""
    heartbeat: HeartbeatConfig | None = None
    """Check-ins the agent makes on its own, delivered where it says; unset: none."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """Spending limits, checked before every model call of this agent; unset: none."""
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    """Models for background work (a cheaper one, say); unset: the agent's own."""


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


class SpeechConfig(Section):
    engine: Literal["openai", "piper"] = "openai"
    """openai: any OpenAI-compatible /audio/speech at `base_url`; piper: Piper's engine in
    this process (the voice-local extra), `voice` the path of a Piper voice (.onnx, with its
    .onnx.json beside it)."""
    base_url: str | None = None
    """An OpenAI-compatible server with /audio/speech: https://api.openai.com/v1, or a local
    one (Kokoro-FastAPI, a Piper server) at its address."""
    api_key: SecretStr | None = None
    """Its key, if it needs one."""
    model: str = "gpt-4o-mini-tts"
    """The text-to-speech model (tts-1, kokoro, ...)."""
    voice: str = "alloy"
    """The voice, as the server names it."""
    timeout: Duration = 60.0
    """The longest one spoken reply may take to make."""
    max_chars: int = Field(default=1500, ge=100, le=4096)
    """The most characters one voice note says (about a minute and a half); a longer
    answer is cut between sentences into several."""
    max_notes: int = Field(default=3, ge=1, le=10)
    """The most voice notes one answer becomes; what is past them is in the text only."""
    price_per_million_chars: float | None = Field(default=None, ge=0)
    """USD per million characters spoken, for costs and budgets; unset: the list price of
    OpenAI's models (tts-1, tts-1-hd, gpt-4o-mini-tts), zero for any other."""

    @field_validator("base_url")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// address")
        return value

    @model_validator(mode="after")
    def _engine_has_what_it_needs(self) -> SpeechConfig:
        if self.engine == "openai" and self.base_url is None:
            raise ValueError("base_url: needed by the openai engine (or engine: piper)")
        if self.engine == "piper" and not self.voice.endswith(".onnx"):
            raise ValueError("voice: the piper engine takes a voice's .onnx file")
        return self


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


class BackupConfig(Section):
    dir: str = "~/.local/share/rousseau/backups"
    """Where `rousseau backup create` writes when given no path, and scheduled backups go."""
    every: Duration | None = None
    """Make a backup this often while the daemon runs (e.g. 1d); unset: only when asked."""
    keep: int = Field(default=7, ge=1)
    """Scheduled backups kept in `dir` (the oldest deleted after each new one)."""


class AlertsConfig(Section):
    deliver_to: list[str] = Field(default_factory=list)
    """Chats told when something needs the owner, as transport:chat (e.g. telegram:42);
    an alert about a transport never goes through that transport."""
    after: Duration = 300.0
    """How long a transport is down (not connected, or failing) before it is told."""

    @field_validator("deliver_to")
    @classmethod
    def _targets(cls, targets: list[str]) -> list[str]:
        for target in targets:
            transport, _, chat = target.partition(":")
            if not transport or not chat:
                raise ValueError(f"{target!r} is not transport:chat (e.g. telegram:42)")
        return targets


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
    trusted_proxies: list[str] = Field(default_factory=list)
    """The proxies (addresses or CIDR networks) whose X-Forwarded-For and X-Forwarded-Proto
    are believed: the client's address and https come from them. Empty: believed from no
    one, loopback included."""
    api_max_bytes: int = Field(default=4_000_000, ge=1024)
    """The largest request body of the OpenAI-compatible API (a call sends the whole
    conversation); a larger one is refused with 413 before it is read."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        """Each as a network (an address is a network of one), so a mistyped one is an error
        here rather than a proxy silently not trusted."""
        found = []
        for proxy in proxies:
            try:
                found.append(str(ipaddress.ip_network(proxy.strip(), strict=False)))
            except ValueError:
                raise ValueError(f"{proxy!r} is not an address or a network (10.0.0.0/8)") from None
        return found
