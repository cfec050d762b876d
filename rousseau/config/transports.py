"""The transports' sections: what every transport shares (`TransportConfig`), then each
platform's credentials and options. A transport runs when its section is present.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr

from rousseau.config.base import Duration, Policy, Section, SenderId


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
    before the answer starts (Telegram, Discord, Matrix: the emoji, e.g. 👀; Slack and
    Mattermost: its name, e.g. eyes; Feishu: its emoji_type, e.g. GLANCE); empty: none."""
    agent: str | None = None
    """The agent (of `agents:`) answering this transport's chats that no route names;
    unset: `default_agent`."""
    voice_replies: Literal["off", "when_voice", "always"] | None = None
    """With `speech` set: answer with a voice note too, after the text (`when_voice`: a voice
    note with one, `always`: every message); `/voice on|off` changes it per chat. Unset:
    when_voice once `speech` is set."""


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
    encryption: bool = False
    """Read and answer end-to-end encrypted rooms (the device's keys are kept in `store`);
    off, an encrypted room is never answered, and a warning names it."""
    store: str | None = None
    """With encryption: the folder keeping this machine's device keys, Olm/Megolm sessions
    and login (0700); unset: `matrix-keys` beside the state database."""


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


class IRCConfig(TransportConfig):
    server: str | None = None
    """The IRC server's host name, e.g. irc.libera.chat."""
    port: int | None = None
    """Its port; unset: 6697 with tls, 6667 without."""
    tls: bool = True
    """TLS from the first byte (the server's certificate checked unless tls_verify is off)."""
    tls_verify: bool = True
    """Check the server's certificate (off only for a test server; a self-signed one can be
    trusted by naming it in SSL_CERT_FILE instead)."""
    nick: str = "rousseau"
    """The bot's nick (taken with a _ after it when in use)."""
    password: SecretStr | None = None
    """The account's password (or IRC_PASSWORD): SASL PLAIN where the server offers it,
    else NickServ IDENTIFY."""
    sasl_username: str | None = None
    """The account name for SASL; unset: the nick."""
    server_password: SecretStr | None = None
    """A password the server itself asks for (PASS), rarely needed."""
    channels: list[str] = Field(default_factory=list)
    """Channels joined (and joined again after a reconnect), e.g. ["#rousseau"]."""
    line_interval: Duration = 1.0
    """After a burst of a few lines, one line each this long (flood protection)."""


class XMPPConfig(TransportConfig):
    jid: str | None = None
    """The bot's account, e.g. rousseau@example.org (a bare address: the daemon picks a
    resource of its own)."""
    password: SecretStr | None = None
    """The account's password (or XMPP_PASSWORD)."""
    server: str | None = None
    """host or host:port to connect to; unset: found from the address's domain (DNS SRV
    records, then the domain itself on port 5222)."""
    tls: Literal["starttls", "direct", "off"] = "starttls"
    """How the stream is encrypted: STARTTLS on the client port, TLS from the first byte
    (port 5223), or not at all (a test server on this machine only: the password then
    crosses in the clear, hashed by SCRAM)."""
    tls_verify: bool = True
    """Check the server's certificate (off only for a test server; a self-signed one can be
    trusted by naming it in SSL_CERT_FILE instead)."""
    rooms: list[str] = Field(default_factory=list)
    """Group chats (MUC rooms) joined, e.g. ["team@conference.example.org"], and joined
    again after a reconnect."""
    nick: str = "rousseau"
    """The bot's nick in rooms; a room line is answered when it names it."""


class MattermostActionsConfig(Section):
    url: str
    """The public address Mattermost posts a button's press to (a reverse proxy in front of
    `listen`), e.g. https://bot.example.org/mattermost/actions; its path is the route."""
    listen: str = "127.0.0.1:8097"
    """Where this daemon takes the presses (host:port); the web face's address serves them
    on its server."""


class MattermostConfig(TransportConfig):
    actions: MattermostActionsConfig | None = None
    """Approvals as buttons (interactive message buttons, which Mattermost answers by posting
    to an address of the daemon's); unset: approvals are answered by typing them."""
    url: str | None = None
    """The server's address, e.g. https://chat.example.org."""
    token: SecretStr | None = None
    """A bot account's access token (System Console > Integrations > Bot Accounts), or a
    personal access token (or MATTERMOST_TOKEN)."""


class GoogleChatConfig(TransportConfig):
    credentials_file: str | None = None
    """The app's service account key (a JSON file from Google Cloud console > IAM > Service
    accounts > Keys): replies, edits and cron deliveries go out as it."""
    audience: str | None = None
    """What Chat's tokens are issued for, as set in the app's configuration (Connection
    settings > Authentication audience): the project number, or the endpoint's URL. Unset:
    any app's (still signed by Chat); doctor and the log say to set it."""
    listen: str = "127.0.0.1:8095"
    """Where this daemon takes Chat's posts (host:port), behind the public HTTPS address the
    app's configuration names; the web face's address serves them on its server."""
    path: str = "/googlechat"
    """The route Chat posts to."""
    api_base: str | None = None
    """The Chat API's address, to use instead of Google's (a proxy, a local fake)."""
    certs_url: str | None = None
    """Where the certificates of Chat's tokens are fetched, instead of Google's."""


class FeishuConfig(TransportConfig):
    app_id: str | None = None
    """The app's App ID (cli_...), from the developer console's Credentials & Basic Info."""
    app_secret: SecretStr | None = None
    """The app's App Secret (or FEISHU_APP_SECRET)."""
    base_url: str = "https://open.feishu.cn"
    """The open platform's address: Feishu's; https://open.larksuite.com for Lark."""


class TeamsConfig(TransportConfig):
    app_id: str | None = None
    """The bot's Microsoft App ID (its Entra app registration's Application (client) ID)."""
    app_password: SecretStr | None = None
    """A client secret of that app registration (or TEAMS_APP_PASSWORD)."""
    tenant_id: str | None = None
    """The Entra tenant of a single-tenant bot (the kind Azure Bot creates now); unset: the
    multi-tenant botframework.com."""
    listen: str = "127.0.0.1:3978"
    """Where this daemon takes Teams' posts (host:port), behind the public HTTPS messaging
    endpoint the bot's registration names; the web face's address serves them on its server."""
    path: str = "/api/messages"
    """The messaging endpoint's route."""
    login_endpoint: str | None = None
    """Where the app's token is asked for, instead of Microsoft Entra's (a sovereign cloud's
    login, or a local fake)."""
    keys_url: str | None = None
    """Where the keys of Teams' tokens are fetched, instead of the Bot Framework's."""
    service_url: str | None = None
    """The Bot Connector address for a conversation Teams has not named one for yet (a
    sovereign cloud's, or a local fake); unset: the public cloud's global one."""
