"""The transports: one module per platform, each imported only when its section is configured.

`build_transports` turns config sections into adapters (as `build_provider` does for models).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from rousseau.agent import ConfigError

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.transports.base import Transport

__all__ = ["API_LENGTH", "TRANSPORTS", "build_transports"]

_log = structlog.get_logger("rousseau.transports")

TRANSPORTS = (
    "telegram",
    "slack",
    "discord",
    "whatsapp",
    "matrix",
    "signal",
    "imessage",
    "email",
    "sms",
    "irc",
    "xmpp",
    "mattermost",
    "googlechat",
    "teams",
    "feishu",
)


def _telegram(section: Any) -> Transport:
    if section is None or section.token is None:
        raise ConfigError("telegram.token: not set; set it or TELEGRAM_BOT_TOKEN")
    from rousseau.transports.telegram import TelegramTransport, Webhook

    hook = section.webhook
    return TelegramTransport(
        section.token.get_secret_value(),
        base_url=section.base_url,
        webhook=(
            Webhook(
                url=hook.url,
                listen=hook.listen,
                secret=hook.secret.get_secret_value() if hook.secret is not None else "",
            )
            if hook is not None
            else None
        ),
    )


def _slack(section: Any) -> Transport:
    if section is None or section.app_token is None or section.bot_token is None:
        raise ConfigError(
            "slack: set app_token and bot_token (or SLACK_APP_TOKEN and SLACK_BOT_TOKEN)"
        )
    from rousseau.transports.slack import SlackTransport

    return SlackTransport(
        section.app_token.get_secret_value(),
        section.bot_token.get_secret_value(),
        bot_user_id=section.bot_user_id,
        base_url=section.base_url,
        native_streams=section.streaming == "native",
    )


def _discord(section: Any) -> Transport:
    if section is None or section.token is None:
        raise ConfigError("discord.token: not set; set it or DISCORD_TOKEN")
    from rousseau.transports.discord import DiscordTransport

    return DiscordTransport(
        section.token.get_secret_value(), api_base=section.api_base, gateway_url=section.gateway_url
    )


def _signal(section: Any) -> Transport:
    if section is None or not section.account:
        raise ConfigError("signal.account: not set (the bot's number, e.g. +15551234567)")
    from rousseau.transports.signal import SignalTransport

    return SignalTransport(section.account, binary=section.binary, extra_args=section.extra_args)


def _matrix(section: Any) -> Transport:
    if section is None or not section.homeserver_url or not section.user_id:
        raise ConfigError("matrix: set homeserver_url and user_id")
    if section.access_token is None and section.password is None:
        raise ConfigError("matrix: set access_token or password (or MATRIX_ACCESS_TOKEN)")
    from pathlib import Path

    from rousseau.transports.matrix import MatrixTransport

    allowed = frozenset(section.allowlist)
    is_open = section.policy == "open"

    def may_invite(sender: str) -> bool:
        return is_open or sender in allowed

    return MatrixTransport(
        section.homeserver_url,
        section.user_id,
        access_token=_secret(section.access_token),
        password=_secret(section.password),
        device_id=section.device_id,
        msgtype=section.msgtype,
        may_invite=may_invite,
        encryption=section.encryption,
        store=Path(section.store).expanduser() if section.encryption else None,
    )


def _whatsapp(section: Any) -> Transport:
    from pathlib import Path

    from rousseau.config import WhatsAppConfig
    from rousseau.private import private_folder
    from rousseau.transports.whatsapp import NeonizeClient, WhatsAppTransport

    store = Path((section or WhatsAppConfig()).store).expanduser()
    private_folder(store.parent)
    return WhatsAppTransport(NeonizeClient(str(store)))


def _email(section: Any) -> Transport:
    if section is None or not section.imap_addr or not section.smtp_addr:
        raise ConfigError("email: set imap_addr and smtp_addr")
    if not section.imap_username or section.imap_password is None:
        raise ConfigError("email: set imap_username and imap_password (or EMAIL_IMAP_PASSWORD)")
    address = section.from_ or section.imap_username
    if "@" not in address:
        raise ConfigError("email.from: not set; the bot's address, e.g. bot@example.org")
    from rousseau.transports.mail import EmailTransport

    return EmailTransport(
        imap_addr=section.imap_addr,
        username=section.imap_username,
        password=section.imap_password.get_secret_value(),
        smtp_addr=section.smtp_addr,
        from_addr=address,
        smtp_username=section.smtp_username,
        smtp_password=_secret(section.smtp_password),
        mailbox=section.mailbox,
        poll_interval=section.poll_interval,
        security=section.tls,
        idle=section.idle,
        ca_file=section.ca_file,
    )


def _imessage(section: Any) -> Transport:
    if section is None or not section.base_url or section.password is None:
        raise ConfigError("imessage: set base_url and password (or BLUEBUBBLES_PASSWORD)")
    from rousseau.transports.imessage import IMessageTransport

    return IMessageTransport(
        section.base_url,
        section.password.get_secret_value(),
        poll_interval=section.poll_interval,
        private_api=section.private_api,
        mention_names=section.mention_names,
    )


def _sms(section: Any) -> Transport:
    from rousseau.transports.sms import Sender, SMSTransport, TwilioSender, VonageSender

    if section is None or not section.from_:
        raise ConfigError("sms.from: not set (the sending number, e.g. +15551234567)")
    sender: Sender
    if section.provider == "twilio":
        if not section.account_sid or section.auth_token is None:
            raise ConfigError("sms: set account_sid and auth_token (or TWILIO_AUTH_TOKEN)")
        sender = TwilioSender(
            section.account_sid,
            section.auth_token.get_secret_value(),
            section.from_,
            base_url=section.base_url,
            status_timeout=section.status_timeout,
        )
    else:
        if not section.api_key or section.api_secret is None:
            raise ConfigError("sms: set api_key and api_secret (or VONAGE_API_SECRET)")
        sender = VonageSender(
            section.api_key,
            section.api_secret.get_secret_value(),
            section.from_,
            base_url=section.base_url,
        )
    hook = section.webhook
    if hook is not None and section.provider != "twilio":
        raise ConfigError("sms.webhook: inbound SMS is supported with twilio only")
    return SMSTransport(
        sender,
        webhook_listen=hook.listen if hook else None,
        webhook_path=hook.path if hook else "/sms/twilio",
        public_url=hook.public_url if hook else None,
        auth_token=_secret(section.auth_token),
    )


def _irc(section: Any) -> Transport:
    if section is None or not section.server:
        raise ConfigError("irc.server: not set (the IRC server's host name)")
    from rousseau.transports.irc import IRCTransport

    return IRCTransport(
        section.server,
        section.nick,
        port=section.port or (6697 if section.tls else 6667),
        tls=section.tls,
        tls_verify=section.tls_verify,
        password=_secret(section.password),
        sasl_username=section.sasl_username,
        server_password=_secret(section.server_password),
        channels=section.channels,
        allowlist=section.allowlist,
        line_interval=section.line_interval,
    )


def _xmpp(section: Any) -> Transport:
    if section is None or not section.jid or "@" not in section.jid:
        raise ConfigError("xmpp.jid: not set (the bot's address, e.g. rousseau@example.org)")
    if section.password is None:
        raise ConfigError("xmpp.password: not set; set it or XMPP_PASSWORD")
    server = section.server or ""
    if server.count(":") == 1 and not server.rpartition(":")[2].isdigit():
        raise ConfigError(f"xmpp.server: {server!r} is not host or host:port")
    from rousseau.transports.xmpp import XMPPTransport

    return XMPPTransport(
        section.jid,
        section.password.get_secret_value(),
        server=section.server,
        tls=section.tls,
        tls_verify=section.tls_verify,
        rooms=section.rooms,
        nick=section.nick,
    )


def _mattermost(section: Any) -> Transport:
    if section is None or not section.url:
        raise ConfigError("mattermost.url: not set (the server's address)")
    if not section.url.startswith(("https://", "http://")):
        raise ConfigError(f"mattermost.url: {section.url!r} is not an http(s) address")
    if section.token is None:
        raise ConfigError("mattermost.token: not set; set it or MATTERMOST_TOKEN")
    from rousseau.transports.mattermost import MattermostTransport

    actions = section.actions
    return MattermostTransport(
        section.url,
        section.token.get_secret_value(),
        actions=(actions.url, actions.listen) if actions is not None else None,
    )


def _googlechat(section: Any) -> Transport:
    import json

    if section is None or not section.credentials_file:
        raise ConfigError("googlechat.credentials_file: not set (the service account's JSON key)")
    path = Path(section.credentials_file).expanduser()
    try:
        credentials = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(
            f"googlechat.credentials_file: cannot read {path}: {exc.strerror}"
        ) from None
    except ValueError:
        raise ConfigError(f"googlechat.credentials_file: {path} is not a JSON key") from None
    from rousseau.transports.googlechat import GoogleChatTransport

    try:
        return GoogleChatTransport(
            credentials,
            audience=str(section.audience) if section.audience else None,
            listen=section.listen,
            path=section.path,
            api_base=section.api_base,
            certs_url=section.certs_url,
        )
    except (ValueError, KeyError) as exc:  # google-auth's word on a key that is not one
        raise ConfigError(
            f"googlechat.credentials_file: {path} is not a service account key ({exc})"
        ) from None


def _teams(section: Any) -> Transport:
    if section is None or not section.app_id:
        raise ConfigError("teams.app_id: not set (the bot's Microsoft App ID)")
    if section.app_password is None:
        raise ConfigError("teams.app_password: not set; set it or TEAMS_APP_PASSWORD")
    from rousseau.transports.teams import TeamsTransport

    return TeamsTransport(
        section.app_id,
        section.app_password.get_secret_value(),
        listen=section.listen,
        tenant_id=section.tenant_id,
        path=section.path,
        login_endpoint=section.login_endpoint,
        keys_url=section.keys_url,
        service_url=section.service_url,
    )


def _feishu(section: Any) -> Transport:
    if section is None or not section.app_id:
        raise ConfigError("feishu.app_id: not set (the app's App ID, cli_...)")
    if section.app_secret is None:
        raise ConfigError("feishu.app_secret: not set; set it or FEISHU_APP_SECRET")
    address = urlsplit(section.base_url)
    local = address.hostname in ("127.0.0.1", "localhost", "::1")
    if address.scheme != "https" and not (address.scheme == "http" and local):
        raise ConfigError(f"feishu.base_url: {section.base_url!r} is not an https address")
    if address.path.strip("/") or address.query:
        raise ConfigError(f"feishu.base_url: {section.base_url!r} has a path; give the origin")
    from rousseau.transports.feishu import FeishuTransport

    return FeishuTransport(
        section.app_id, section.app_secret.get_secret_value(), base_url=section.base_url
    )


_BUILDERS: dict[str, Callable[[Any], Transport]] = {
    "telegram": _telegram,
    "slack": _slack,
    "discord": _discord,
    "signal": _signal,
    "matrix": _matrix,
    "whatsapp": _whatsapp,
    "imessage": _imessage,
    "email": _email,
    "sms": _sms,
    "irc": _irc,
    "xmpp": _xmpp,
    "mattermost": _mattermost,
    "googlechat": _googlechat,
    "teams": _teams,
    "feishu": _feishu,
}


API_LENGTH = 1_000_000
"""An API answer is one message: the caller has no length limit worth splitting for."""


def build_transports(config: Config, only: str | None = None) -> dict[str, Transport]:
    """The configured transports (a section with its credentials), each imported on demand."""
    names = [only] if only else list(config.transport_sections())
    built: dict[str, Transport] = {}
    for name in names:
        builder = _BUILDERS.get(name)
        if builder is not None:
            built[name] = builder(getattr(config, name, None))
        elif (made := _plugin(config, name, strict=only is not None)) is not None:
            built[name] = made
    if not only:
        for name, configured in config.plugins.items():
            if configured.installed.kind == "transport" and configured.plugin is None:
                _log.error("plugins.failed", plugin=name, error=configured.error)
    if config.web is not None and not only:
        from rousseau.web.chat import WebChat

        built["web"] = WebChat("web")  # the dashboard's chat page
        built["api"] = WebChat("api", max_length=API_LENGTH)  # the OpenAI-compatible API
    if not built:
        raise ConfigError(
            f"no transport configured: add a section for one of {', '.join(_BUILDERS)} with its "
            "credentials (or set TELEGRAM_BOT_TOKEN, ...), or web: for the web chat; see"
            " config/config.yaml"
        )
    return built


def _plugin(config: Config, name: str, *, strict: bool) -> Transport | None:
    """Transport plugin `name` built from its section. A plugin that did not load or fails
    to build stops only itself (one line in the log), unless `strict` (one transport asked
    for by name): then it is a ConfigError."""
    configured = config.plugins.get(name)
    if configured is None or configured.installed.kind != "transport":
        raise ConfigError(f"{name}: no such transport (nor an installed transport plugin)")
    from rousseau.plugins import PluginError
    from rousseau.transports.base import describe

    try:
        return configured.make()  # type: ignore[no-any-return]
    except PluginError as exc:
        error = describe(exc, *config.secrets())
    if strict:
        raise ConfigError(f"{name}: the transport plugin did not load: {error}")
    _log.error("plugins.failed", plugin=name, error=error)
    return None


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
