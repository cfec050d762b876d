"""`rousseau init`, for the platforms besides Telegram: what each asks, its credentials
checked by the transport itself (the calls `rousseau doctor` makes), and the owner admitted
by the first direct message they send (WhatsApp: the phone that links it; email: the first
mail)."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli.common import first_cause
from rousseau.cli.init import (
    Answers,
    Failed,
    call_transport,
    confirm,
    load_text,
    mask,
    masked,
    printable,
    render,
)

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.messages import Inbound
    from rousseau.transports.base import Transport


@dataclass(frozen=True, slots=True)
class Ask:
    """One key of the platform's section, asked at the terminal (or, with --yes, read from
    the environment)."""

    key: str
    prompt: str
    comment: str
    """The line written above the key in the file."""
    variable: str = ""
    """The environment variable that gives it (the loader reads it too); empty:
    ROUSSEAU_SECTION_KEY."""
    secret: bool = False
    default: str = ""
    choices: tuple[str, ...] = ()
    starts: tuple[str, ...] = ()
    """What a valid value starts with (Slack's token kinds, Matrix ids, addresses)."""
    has: str = ""
    """What a valid value holds (an address's @, a Matrix id's :)."""


@dataclass(frozen=True, slots=True)
class Platform:
    name: str
    label: str
    module: str
    """The SDK whose presence says the platform's extra is installed (empty: none needed)."""
    intro: str
    asks: tuple[Ask, ...] = ()
    carried: tuple[str, ...] = ()
    """Keys never asked, written when the environment gives them (ROUSSEAU_SECTION_KEY):
    a proxy's or a local server's address."""
    send_first: str = ""
    """What the owner is told to do so their first message arrives ({me} is the bot)."""
    me: str = ""
    """The key naming the bot as the owner addresses it; empty: as the check said."""

    @property
    def extra(self) -> str:
        return self.name


def _var(platform: str, key: str) -> str:
    return f"ROUSSEAU_{platform}_{key}".upper()


SLACK_MANIFEST = """\
display_information:
  name: rousseau
features:
  app_home: {messages_tab_enabled: true, messages_tab_read_only_enabled: false}
  bot_user: {display_name: rousseau, always_online: true}
oauth_config:
  scopes:
    bot: [app_mentions:read, channels:history, chat:write, files:read, files:write,
          groups:history, im:history, im:read, im:write, mpim:history, reactions:write,
          users:read]
settings:
  event_subscriptions:
    bot_events: [app_mention, message.channels, message.groups, message.im, message.mpim]
  interactivity: {is_enabled: true}
  socket_mode_enabled: true"""
"""The app the Slack transport expects: Socket Mode, direct messages, mentions, files,
buttons (interactivity), reactions."""


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform(
            "discord",
            "a Discord bot",
            "discord",
            "Discord: at https://discord.com/developers/applications create an application;\n"
            "on its Bot page press Reset Token and copy the token, and turn on Message\n"
            "Content Intent (the bot cannot read messages without it).",
            (
                Ask(
                    "token",
                    "Bot token",
                    "The bot's token (DISCORD_TOKEN is read when this is unset).",
                    "DISCORD_TOKEN",
                    secret=True,
                ),
            ),
            ("api_base", "gateway_url"),
            "Now send {me} a direct message from your own Discord account (in a server you\n"
            "share, click its name > Message).",
        ),
        Platform(
            "slack",
            "a Slack app (Socket Mode)",
            "slack_bolt",
            "Slack: at https://api.slack.com/apps press Create New App > From a manifest, pick\n"
            "your workspace and paste this manifest:\n\n"
            + "\n".join("    " + line for line in SLACK_MANIFEST.splitlines())
            + "\n\nInstall the app to the workspace. Then copy two tokens: on Basic Information,\n"
            "App-Level Tokens > Generate (scope connections:write), an xapp-... token; on\n"
            "OAuth & Permissions, the Bot User OAuth Token, xoxb-...",
            (
                Ask(
                    "app_token",
                    "App-level token (xapp-...)",
                    "The app-level token (or SLACK_APP_TOKEN).",
                    "SLACK_APP_TOKEN",
                    secret=True,
                    starts=("xapp-",),
                ),
                Ask(
                    "bot_token",
                    "Bot token (xoxb-...)",
                    "The bot token (or SLACK_BOT_TOKEN).",
                    "SLACK_BOT_TOKEN",
                    secret=True,
                    starts=("xoxb-",),
                ),
            ),
            ("base_url",),
            "Now send the app a direct message from your own Slack account (its Messages tab).",
        ),
        Platform(
            "matrix",
            "a Matrix account for the bot",
            "nio",
            "Matrix: the bot needs an account of its own on a homeserver (register one, e.g.\n"
            "@rousseau-bot:matrix.org, in any client).",
            (
                Ask(
                    "homeserver_url",
                    "Homeserver address",
                    "The homeserver's address.",
                    default="https://matrix.org",
                    starts=("http://", "https://"),
                ),
                Ask(
                    "user_id",
                    "The bot's user id (@name:server)",
                    "The bot's user id.",
                    starts=("@",),
                    has=":",
                ),
                Ask(
                    "password",
                    "The bot's password",
                    "The bot's password (or MATRIX_PASSWORD).",
                    "MATRIX_PASSWORD",
                    secret=True,
                ),
            ),
            ("device_id",),
            "Now, from your own Matrix account, start a direct chat with {me} and send a\n"
            "message (it accepts the invitation while this waits).",
            me="user_id",
        ),
        Platform(
            "mattermost",
            "a Mattermost bot account",
            "aiohttp",
            "Mattermost: in System Console > Integrations > Bot Accounts turn on bot accounts,\n"
            "then in Integrations > Bot Accounts > Add Bot Account make one and copy its access\n"
            "token. Add the bot to the teams and channels it should read.",
            (
                Ask(
                    "url",
                    "Server address",
                    "The server's address.",
                    starts=("http://", "https://"),
                ),
                Ask(
                    "token",
                    "The bot's access token",
                    "The bot account's access token (or MATTERMOST_TOKEN).",
                    "MATTERMOST_TOKEN",
                    secret=True,
                ),
            ),
            (),
            "Now send {me} a direct message from your own Mattermost account.",
        ),
        Platform(
            "googlechat",
            "a Google Chat app (an HTTP endpoint)",
            "google.auth",
            "Google Chat: in the Google Cloud console enable the Chat API; make a service\n"
            "account and a JSON key for it; in the Chat API's Configuration set the app's\n"
            "HTTP endpoint URL (your public HTTPS address, ending in /googlechat, in front of\n"
            "the address asked below) and note the authentication audience (the project\n"
            "number).",
            (
                Ask(
                    "credentials_file",
                    "The service account's JSON key file",
                    "The service account's JSON key.",
                ),
                Ask(
                    "audience",
                    "The app's authentication audience (project number or endpoint URL)",
                    "What Chat's tokens are for: the project number, or the endpoint's URL.",
                ),
                Ask(
                    "listen",
                    "Where this daemon takes Chat's posts (host:port)",
                    "Where this daemon takes Chat's posts, behind the public HTTPS address.",
                    default="127.0.0.1:8095",
                ),
            ),
            ("path", "api_base", "certs_url"),
            "Now send {me} a direct message in Google Chat (find the app under + > Apps).",
        ),
        Platform(
            "teams",
            "a Microsoft Teams bot (Azure Bot)",
            "microsoft_teams",
            "Teams: in the Azure portal create an Azure Bot (single tenant); copy its\n"
            "Microsoft App ID and tenant, and make a client secret (Configuration > Manage\n"
            "Password). Set its messaging endpoint to your public HTTPS address ending in\n"
            "/api/messages (in front of the address asked below), add the Microsoft Teams\n"
            "channel, and install the app in Teams.",
            (
                Ask("app_id", "The bot's Microsoft App ID", "The bot's Microsoft App ID."),
                Ask(
                    "app_password",
                    "The client secret",
                    "A client secret of the bot's app registration (or TEAMS_APP_PASSWORD).",
                    "TEAMS_APP_PASSWORD",
                    secret=True,
                ),
                Ask("tenant_id", "The tenant id", "The bot's Entra tenant."),
                Ask(
                    "listen",
                    "Where this daemon takes Teams' posts (host:port)",
                    "Where this daemon takes Teams' posts, behind the messaging endpoint.",
                    default="127.0.0.1:3978",
                ),
            ),
            ("path", "login_endpoint", "keys_url", "service_url"),
            "Now send {me} a message in a personal chat in Teams.",
        ),
        Platform(
            "feishu",
            "a Feishu or Lark app's bot (persistent connection)",
            "lark_oapi",
            "Feishu/Lark: in the developer console create a custom app with the Bot ability;\n"
            "grant the permissions docs/transports/feishu.md lists, subscribe to\n"
            "im.message.receive_v1 and card.action.trigger through a persistent connection,\n"
            "publish a version, and copy the App ID and App Secret.",
            (
                Ask("app_id", "The App ID (cli_...)", "The app's App ID.", starts=("cli_",)),
                Ask(
                    "app_secret",
                    "The App Secret",
                    "The app's App Secret (or FEISHU_APP_SECRET).",
                    "FEISHU_APP_SECRET",
                    secret=True,
                ),
            ),
            ("base_url",),
            "Now send the bot a direct message from your own Feishu account.",
        ),
        Platform(
            "email",
            "a mailbox (IMAP and SMTP)",
            "imapclient",
            "Email: the bot reads a mailbox of its own over IMAP and answers over SMTP.",
            (
                Ask("imap_addr", "IMAP server (host:port)", "The IMAP server as host:port."),
                Ask("imap_username", "IMAP user name", "The IMAP login name."),
                Ask(
                    "imap_password",
                    "IMAP password",
                    "The IMAP password (or EMAIL_IMAP_PASSWORD).",
                    "EMAIL_IMAP_PASSWORD",
                    secret=True,
                ),
                Ask(
                    "smtp_addr",
                    "SMTP server (host:port)",
                    "The SMTP server as host:port (its login is the IMAP one).",
                ),
                Ask("from", "The bot's address", "The address mail is sent from.", has="@"),
                Ask(
                    "tls",
                    "Security: tls, starttls or plain",
                    "tls (from the first byte), starttls, or plain (local servers only).",
                    default="tls",
                    choices=("tls", "starttls", "plain"),
                ),
            ),
            ("ca_file", "mailbox"),
            "Now send a mail to {me} from your own address.",
            me="from",
        ),
        Platform(
            "signal",
            "a Signal number, through signal-cli",
            "",
            "Signal: rousseau drives signal-cli (https://github.com/AsamK/signal-cli), which\n"
            "must be installed here with the bot's number registered or linked.",
            (Ask("binary", "signal-cli program", "The signal-cli program.", default="signal-cli"),),
            ("extra_args",),
            "Now send a Signal message to {me} from your own phone.",
            me="account",
        ),
        Platform(
            "whatsapp",
            "a WhatsApp account, linked like WhatsApp Web",
            "neonize",
            "WhatsApp: rousseau links to an account as WhatsApp Web does; the phone that\n"
            "links it is the owner, who talks to it in the chat 'Message yourself'.",
            carried=("store",),
        ),
    )
}
"""Every platform `init` sets up besides Telegram, in the order offered."""


@dataclass(kw_only=True, slots=True)
class Chosen:
    """One platform's section as it will be written."""

    platform: Platform
    values: dict[str, str] = field(default_factory=dict)
    """Section keys and their values, in the order written."""
    owners: list[str] = field(default_factory=list)
    """Sender ids admitted, and asked about tool calls."""

    def secrets(self) -> list[str]:
        secret = {a.key for a in self.platform.asks if a.secret}
        return [v for k, v in self.values.items() if k in secret and v]

    def lines(self) -> list[str]:
        comments = {a.key: a.comment for a in self.platform.asks}
        out = ["", f"{self.platform.name}:"]
        for key, value in self.values.items():
            if key in comments:
                out.append(f"  # {comments[key]}")
            out.append(f"  {key}: {_value(key, value)}")
        out += [
            "  # The senders that may talk to the bot; everyone else is ignored.",
            f"  allowlist: [{', '.join(json.dumps(o) for o in self.owners)}]",
            "  # allowlist, or pairing (strangers get a code to `rousseau pair approve`), or open.",
            "  policy: allowlist",
        ]
        return out


def _value(key: str, value: str) -> str:
    """As YAML reads it: a list given through the environment stays a list."""
    if key == "extra_args":
        import yaml

        given = yaml.safe_load(value)
        return json.dumps(given if isinstance(given, list) else value.split())
    return json.dumps(value)


def set_up(args: argparse.Namespace, answers: Answers, folder: Path, name: str) -> None:
    """Ask for `name`'s credentials, check them, admit its owner; on success the section
    joins `answers` (a platform given up on leaves the rest to be written)."""
    platform = PLATFORMS[name]
    chosen = Chosen(platform=platform, owners=list(args.allow))
    if not args.yes:
        print(f"\n{platform.intro}")
    for key in platform.carried:
        if os.environ.get(_var(name, key), "").strip():
            chosen.values[key] = os.environ[_var(name, key)].strip()
    if name == "whatsapp":
        from rousseau.cli.init_links import whatsapp

        whatsapp(args, chosen)
        answers.chosen.append(chosen)
        return
    _answer(args, chosen, [a.key for a in platform.asks])
    if name == "signal":
        from rousseau.cli.init_links import signal_account

        signal_account(args, chosen)
    answers.chosen.append(chosen)
    mask(args, answers.secrets())
    who = name if args.no_check else _prove(args, answers, chosen, folder)
    if not chosen.owners:
        me = chosen.values.get(platform.me) or who
        chosen.owners = [_owner(args, answers, chosen, folder, me)]


def _answer(args: argparse.Namespace, chosen: Chosen, keys: list[str]) -> None:
    """Ask each key in `keys` (at a terminal), or read it from the environment."""
    name = chosen.platform.name
    for ask in chosen.platform.asks:
        if ask.key not in keys:
            continue
        variable = ask.variable or _var(name, ask.key)
        given = os.environ.get(variable, "").strip()
        default = chosen.values.get(ask.key) or given or ask.default
        if ask.key == "from" and not default and "@" in chosen.values.get("imap_username", ""):
            default = chosen.values["imap_username"]
        if args.yes:
            if not default:
                missing = f"{name}.{ask.key}: not given; set {variable}"
                raise Failed(f"{missing} (or run at a terminal)", 2)
            chosen.values[ask.key] = default
            continue
        chosen.values[ask.key] = _ask(ask, default, from_variable=bool(given) and ask.secret)


def _ask(ask: Ask, default: str, *, from_variable: bool) -> str:
    import getpass

    while True:
        if ask.secret:
            hint = f"Enter: the one in {ask.variable}" if from_variable else "input hidden"
            answer = getpass.getpass(f"{ask.prompt} ({hint}): ").strip() or default
        else:
            answer = input(f"{ask.prompt}{f' [{default}]' if default else ''}: ").strip()
            answer = answer or default
        if not answer:
            continue
        if ask.choices and answer not in ask.choices:
            print(f"  one of: {', '.join(ask.choices)}")
        elif ask.starts and not answer.startswith(ask.starts):
            print(f"  it starts with {' or '.join(ask.starts)}")
        elif ask.has not in answer:
            print(f"  it has a {ask.has} in it")
        else:
            return answer


def _prove(args: argparse.Namespace, answers: Answers, chosen: Chosen, folder: Path) -> str:
    """Who the transport is, as the platform says with the credentials given; a failure,
    at a terminal, asks for them again (what was answered is offered again)."""
    name = chosen.platform.name
    while True:
        try:
            transport = _transport(load_text(render(answers), folder), name)
            who = call_transport(transport, transport.check)
            if name == "discord":
                who += "\n" + _invite(transport)
        except Failed as exc:
            again = [a.key for a in chosen.platform.asks if a.key != "binary"]
            if args.yes or not again:
                raise
            print(f"FAIL  {masked(exc)}")
            _answer(args, chosen, again)
            mask(args, answers.secrets())
            continue
        print(f"ok    {name}: {printable(who)}" if name != "discord" else f"ok    discord: {who}")
        return who.splitlines()[0]


def _invite(transport: Transport) -> str:
    from rousseau.transports.discord import DiscordTransport, invite_url

    assert isinstance(transport, DiscordTransport)
    app = call_transport(transport, transport.application_id)
    return (
        "      Invite it to a server of yours (you DM it there), with the permissions it uses:\n"
        f"      {invite_url(app)}"
    )


def _transport(config: Config, name: str) -> Transport:
    from rousseau.agent import RousseauError
    from rousseau.transports import build_transports

    try:
        transport = build_transports(config, only=name)[name]
    except RousseauError as exc:
        raise Failed(str(exc)) from None
    if name == "matrix":  # while the owner is unknown, any invitation is accepted
        from rousseau.transports.matrix import MatrixTransport

        assert isinstance(transport, MatrixTransport)
        transport.may_invite = lambda sender: True
    return transport


def _owner(
    args: argparse.Namespace, answers: Answers, chosen: Chosen, folder: Path, who: str
) -> str:
    """The sender id of whoever writes to the bot now, once the user confirms it."""
    import time

    name = chosen.platform.name
    if name == "email":
        from rousseau.cli.init_links import first_mail

        return first_mail(args, load_text(render(answers), folder), who)
    transport = _transport(load_text(render(answers), folder), name)
    deadline = time.monotonic() + args.wait
    print("\n" + chosen.platform.send_first.format(me=who))
    print(f"Waiting up to {args.wait:.0f} s ...", flush=True)
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                found = _admitted(transport, remaining) if remaining > 0 else None
            except Failed as exc:  # e.g. Discord's Message Content Intent still off
                print(f"FAIL  {masked(exc)}")
                input("Put it right, then press Enter to wait again (Ctrl-C: nothing written) ")
                deadline = time.monotonic() + args.wait
                continue
            if found is None:
                raise Failed(
                    f"no direct message reached the bot within {args.wait:.0f} s; nothing "
                    "written (run it again, or pass --allow ID)"
                )
            return found.sender_id
    finally:
        import anyio

        anyio.run(transport.aclose)


def _admitted(transport: Transport, wait: float) -> Inbound | None:
    """Whoever the user admits, of those writing to the bot directly within `wait` seconds
    (None: no one). One connection for the whole wait: a message sent just after another
    was declined is not lost to a reconnection."""
    import anyio

    from rousseau import web
    from rousseau.agent import RousseauError
    from rousseau.messages import Inbound
    from rousseau.transports.abilities import Abilities

    async def listen() -> Inbound | None:
        send, receive = anyio.create_memory_object_stream[Inbound](64)
        admitted: list[Inbound] = []

        async def take(inbound: Inbound) -> None:
            if not inbound.is_group:
                await send.send(inbound)

        async def ask(serving: anyio.CancelScope) -> None:
            async for inbound in receive:
                name, sender = inbound.sender_name, inbound.sender_id
                shown = printable(f"{name} ({sender})" if name and name != sender else sender)
                print(f"\nMessage from {shown}.")
                with anyio.CancelScope(shield=True):  # the wait ends, not the answer
                    if await anyio.to_thread.run_sync(confirm, "Admit them as the owner?"):
                        print(f"ok    {shown} is the owner")
                        admitted.append(inbound)
                        serving.cancel()
                        return
                print("Not admitted. Waiting for another message...", flush=True)

        posts = Abilities.of(transport).posts  # a platform that posts: served meanwhile
        listener = await web.listen(posts.listen, posts.transport) if posts else None
        try:
            with anyio.move_on_after(wait), send, receive:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, tg.cancel_scope)
                    if posts is not None and listener is not None:
                        tg.start_soon(web.serve_posts, [posts], listener)
                    await transport.run(take)
        finally:
            if listener is not None:
                await listener.aclose()
        return admitted[0] if admitted else None

    try:
        return anyio.run(listen)
    except (RousseauError, BaseExceptionGroup) as exc:
        cause = first_cause(exc)
        if not isinstance(cause, RousseauError):
            raise
        raise Failed(str(cause)) from None
