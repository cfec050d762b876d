"""The whole configuration: `Config`, the top-level keys and a section for each part, with
the checks that span sections (agents named by routes and transports exist).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, StringConstraints, model_validator

from rousseau.config.base import Duration, ProviderName, Section
from rousseau.config.providers import (
    AnthropicConfig,
    BedrockConfig,
    ClaudeCLIConfig,
    OllamaConfig,
    OpenAIConfig,
    OpenRouterConfig,
    VertexConfig,
)
from rousseau.config.sections import (
    AgentConfig,
    AlertsConfig,
    BackupConfig,
    CronConfig,
    EmbeddingsConfig,
    HealthConfig,
    LogConfig,
    MCPServerConfig,
    MediaConfig,
    PriceConfig,
    RateLimitConfig,
    RouteConfig,
    SpeechConfig,
    StateConfig,
    WebConfig,
)
from rousseau.config.transports import (
    DiscordConfig,
    EmailConfig,
    FeishuConfig,
    GoogleChatConfig,
    IMessageConfig,
    IRCConfig,
    MatrixConfig,
    MattermostConfig,
    SignalConfig,
    SlackConfig,
    SMSConfig,
    TeamsConfig,
    TelegramConfig,
    TransportConfig,
    WhatsAppConfig,
    XMPPConfig,
)
from rousseau.config.web_tools import WebToolsConfig
from rousseau.messages import DEFAULT_AGENT

if TYPE_CHECKING:
    from rousseau.plugins import Configured

AGENT_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
NOT_INHERITED = frozenset({"heartbeat"})
"""The keys of `agent:` that the agents of `agents:` do not take over."""


class Config(Section):
    """The whole configuration; every key optional."""

    provider: ProviderName | None = None
    """The model backend: anthropic, openai, openrouter, ollama, bedrock, vertex, claudecli
    or a provider plugin's name; unset: the first usable of anthropic, openai, claudecli,
    ollama."""
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
    web_tools: WebToolsConfig = Field(default_factory=WebToolsConfig)
    """The tools that read the web: web_fetch, web_search, browser."""
    embeddings: EmbeddingsConfig | None = None
    """An embeddings endpoint: recall then finds what a message meant as well as the words it
    shares (messages are embedded in the background); unset, recall is by keywords."""
    speech: SpeechConfig | None = None
    """A text-to-speech endpoint: replies are also spoken, as voice notes, where a transport's
    voice_replies says; unset: replies are text only."""
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    """Model prices in USD per million tokens, by model name, over the built-in table (a
    model in neither is costed as zero, with one warning)."""
    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict)
    """External MCP servers by name, whose tools the agent may call as SERVER__TOOL."""
    health: HealthConfig | None = None
    """HTTP /healthz and /metrics; off unless set."""
    backup: BackupConfig = Field(default_factory=BackupConfig)
    """Backups: where they go, and how often the daemon makes one."""
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    """Alerts to the owner on another transport: a transport down, the disk full, the store
    failing, every model call failing, a budget reached."""
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
    irc: IRCConfig | None = None
    """The IRC transport, configured when present with its server."""
    xmpp: XMPPConfig | None = None
    """The XMPP (Jabber) transport, configured when present with its jid."""
    mattermost: MattermostConfig | None = None
    """The Mattermost transport, configured when present with its url."""
    googlechat: GoogleChatConfig | None = None
    """The Google Chat transport (an HTTP endpoint app), configured when present."""
    teams: TeamsConfig | None = None
    """The Microsoft Teams transport (a Bot Framework bot), configured when present."""
    feishu: FeishuConfig | None = None
    """The Feishu/Lark transport (an app's bot, on the long connection), configured when
    present with its app_id."""

    source: str = Field(default="", exclude=True)
    """Where the file came from (empty when only defaults and environment were used)."""
    resolved: list[str] = Field(default_factory=list, exclude=True, repr=False)
    """The values `env:` and `file:` references resolved to (masked like secrets wherever
    the config is shown or logged)."""
    _notices: dict[str, str] = PrivateAttr(default_factory=dict)
    _environ: Mapping[str, str] | None = PrivateAttr(default=None)
    _digest: str = PrivateAttr(default="")
    """The environment the config was read with (a reload reads the file with it again)."""
    _plugins: dict[str, Configured] = PrivateAttr(default_factory=dict)

    @property
    def plugins(self) -> dict[str, Configured]:
        """The plugins whose sections this configuration holds, by key (`load_config` fills
        it): each loaded with its section validated, or the line saying why it is not."""
        return self._plugins

    def transport_sections(self) -> dict[str, TransportConfig]:
        """Every configured transport's section by name: the built-ins', then the plugins'
        that loaded."""
        found = {
            n: s
            for n in type(self).model_fields
            if isinstance(s := getattr(self, n), TransportConfig)
        }
        for name, configured in self._plugins.items():
            if configured.installed.kind == "transport" and configured.plugin is not None:
                found.setdefault(name, configured.section)
        return found

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
                # A heartbeat is one agent's own: inherited, every agent would check in.
                base = {k: v for k, v in base.items() if k not in NOT_INHERITED}
                agents = {
                    name: {**base, **agent} if isinstance(agent, dict) else agent
                    for name, agent in data["agents"].items()
                }
                data = {**data, "agents": agents}
        return data

    @model_validator(mode="after")
    def _matrix_store(self) -> Config:
        """The Matrix key store beside the state database, unless named."""
        if self.matrix is not None and self.matrix.encryption and not self.matrix.store:
            folder = self.state.path.rpartition("/")[0] or "."
            self.matrix.store = f"{folder}/matrix-keys"
        return self

    @model_validator(mode="after")
    def _agents_named_exist(self) -> Config:
        named = [("default_agent", self.default_agent)]
        named += [(f"routes[{i}].agent", r.agent) for i, r in enumerate(self.routes)]
        sections = {"agent": self.agent, **{f"agents.{n}": a for n, a in self.agents.items()}}
        named += [
            (f"{key}.delegation.agents[{i}]", name)
            for key, section in sections.items()
            if section.delegation is not None
            for i, name in enumerate(section.delegation.agents)
        ]
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
        if agent.model is None or provider is None:
            return self.model_copy(update=update)
        plugin = self._plugins.get(provider)
        if plugin is None:
            update[provider] = getattr(self, provider).model_copy(update={"model": agent.model})
        copy = self.model_copy(update=update)
        if plugin is not None and plugin.plugin is not None:
            section = plugin.section.model_copy(update={"model": agent.model})
            copy._plugins = {**self._plugins, provider: replace(plugin, section=section)}
        return copy

    def own_provider(self, name: str) -> bool:
        """Whether agent `name` names a provider or model of its own."""
        agent = self.agents.get(name)
        return agent is not None and (agent.provider is not None or agent.model is not None)

    def reread(self) -> Config:
        """The same file read again, with the same environment (a ConfigError if it is now
        broken, or if there is no file)."""
        from rousseau.agent.errors import ConfigError
        from rousseau.config.loading import load_config

        if not self.source:
            raise ConfigError("no config file to read again (the daemon runs on defaults)")
        return load_config(self.source, self._environ)

    def digest(self) -> str:
        """What identifies the file as it was read (its bytes' hash; empty without a file):
        the same while the file changes on disk, until it is read again."""
        return self._digest

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
        for configured in self._plugins.values():
            walk(configured.section)
        return [s for s in [*found, *self.resolved] if s]
