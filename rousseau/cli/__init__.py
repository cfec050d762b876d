"""The `rousseau` command line: the parser alone; each command lives in its own module.

Handlers are named "module:function" and imported when chosen, so `--help` and the parser
load only argparse; each command imports what it uses.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from rousseau.cli import common

Handler = Callable[[argparse.Namespace], int]


__all__ = ["TRANSPORT_LABELS", "Handler", "build_parser", "main"]

TRANSPORT_LABELS = {
    "telegram": "Telegram",
    "slack": "Slack",
    "discord": "Discord",
    "signal": "Signal",
    "matrix": "Matrix",
    "whatsapp": "WhatsApp",
    "imessage": "iMessage",
    "email": "email",
    "irc": "IRC",
    "xmpp": "XMPP",
    "mattermost": "Mattermost",
    "googlechat": "Google Chat",
    "teams": "Microsoft Teams",
    "feishu": "Feishu/Lark",
}
_INIT_TRANSPORTS = [
    *("telegram", "discord", "slack", "whatsapp", "signal", "matrix", "email", "mattermost"),
    *("googlechat", "teams", "feishu"),
]
"""The transports `rousseau init` sets up."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rousseau",
        description="A chat-agent daemon and the agent library it is built on.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $ROUSSEAU_CONFIG, else ~/.config/rousseau/config.yaml)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and debug logs (default: no)"
    )
    parser.add_argument(
        "--version", action="store_true", help="print the version and exit (as `version` does)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = sub.add_parser("chat", help="chat with the agent in this terminal")
    chat.add_argument(
        "--session", metavar="ID", help="continue (or create) this session (default: a new one)"
    )
    chat.add_argument(
        "-m",
        "--message",
        metavar="TEXT",
        help="send one message, print the reply and exit (default: an interactive chat)",
    )
    chat.add_argument(
        "--agent", default="default", metavar="NAME", help="the agent to talk to (default: default)"
    )
    chat.set_defaults(func="chat:chat")

    session = sub.add_parser("session", help="list, search, show or delete stored sessions")
    ssub = session.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = ssub.add_parser("list", help="recent sessions")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default: 50)")
    ls.set_defaults(func="session:list_sessions")
    search = ssub.add_parser("search", help="find messages containing text")
    search.add_argument("query", help="words to find (full-text search)")
    search.add_argument("--limit", type=int, default=20, help="at most this many (default: 20)")
    search.set_defaults(func="session:search")
    show = ssub.add_parser("show", help="print a session's messages")
    show.add_argument("id", help="the session's id, or enough of its start to be unique")
    show.set_defaults(func="session:show")
    delete = ssub.add_parser("delete", help="delete a session and its messages")
    delete.add_argument("id", help="the session's id, or enough of its start to be unique")
    delete.add_argument("--yes", action="store_true", help="really delete (default: only say what)")
    delete.set_defaults(func="session:delete")

    run = sub.add_parser("run", help="the daemon: every configured transport")
    run.set_defaults(func="run:run", only=None)
    for name, label in TRANSPORT_LABELS.items():
        alone = sub.add_parser(name, help=f"run the {label} transport alone")
        alone.set_defaults(func="run:run", only=name)
        if name == "whatsapp":
            alone.add_argument(
                "action", nargs="?", choices=["login"], help="login: pair by QR code, then exit"
            )
        if name == "matrix":
            alone.add_argument(
                "action",
                nargs="?",
                choices=["devices", "verify", "block", "unverify", "unblock"],
                help="with encryption: list the devices the bot knows, or trust one (or not)",
            )
            alone.add_argument("user", nargs="?", help="the device's user id")
            alone.add_argument("device", nargs="?", help="the device id")

    sub.add_parser(
        "mcp", help="serve the tools and the stored conversations over MCP (stdio)"
    ).set_defaults(func="mcp:mcp")
    audit = sub.add_parser("audit", help="every tool call: who decided, and what came of it")
    audit.add_argument("--limit", type=int, default=50, help="the latest this many (default: 50)")
    audit.add_argument(
        "--session", metavar="ID", help="only this session's calls (default: every session's)"
    )
    audit.set_defaults(func="audit:audit")

    memory = sub.add_parser("memory", help="what each agent keeps about each person")
    msub = memory.add_subparsers(dest="action", metavar="ACTION", required=True)
    for verb, helptext in (
        ("show", "the profiles, each entry numbered as /memory numbers it"),
        ("export", "the profiles as JSON on stdout"),
    ):
        one = msub.add_parser(verb, help=helptext)
        one.add_argument(
            "--agent", metavar="NAME", help="only this agent's profiles (default: every agent's)"
        )
        one.add_argument(
            "person",
            nargs="?",
            metavar="PERSON",
            help="only this person's profile: transport:sender_id, or local for the terminal's"
            " person (default: everyone's)",
        )
        one.set_defaults(func=f"memory:{verb}")
    msub.add_parser(
        "reindex",
        help="embed the stored messages not yet embedded (with `embeddings` set), showing"
        " progress; stopped, it resumes where it was",
    ).set_defaults(func="memory:reindex")

    spend = sub.add_parser(
        "usage", help="what the models cost today and this month, by agent and person"
    )
    spend.add_argument("--agent", metavar="NAME", help="only this agent (default: every agent)")
    spend.add_argument(
        "--day", metavar="YYYY-MM-DD", help="the day (and its month) to show (default: today)"
    )
    spend.add_argument(
        "--limit", type=int, default=20, help="people listed per agent at most (default: 20)"
    )
    spend.add_argument("--json", action="store_true", help="the figures as JSON (default: as text)")
    spend.set_defaults(func="usage:usage")

    plugins = sub.add_parser("plugins", help="the installed transport, tool and provider plugins")
    lsub = plugins.add_subparsers(dest="action", metavar="ACTION", required=True)
    plist = lsub.add_parser("list", help="each plugin, its package, and whether it loaded")
    plist.add_argument("--json", action="store_true", help="as JSON (default: as text)")
    plist.set_defaults(func="plugins:list_plugins")

    skills = sub.add_parser("skills", help="the skills in agent.skills_dir")
    ksub = skills.add_subparsers(dest="action", metavar="ACTION", required=True)
    ksub.add_parser("list", help="each skill, its triggers and description").set_defaults(
        func="skills:list_skills"
    )
    kshow = ksub.add_parser("show", help="a skill's text")
    kshow.add_argument("name", help="the skill's name, as `skills list` shows it")
    kshow.set_defaults(func="skills:show")

    cron = sub.add_parser("cron", help="scheduled prompts delivered to a chat")
    csub = cron.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = csub.add_parser("add", help="add a job (checked before it is saved)")
    add.add_argument("--name", required=True, help="what to call the job (needs a letter)")
    add.add_argument(
        "--schedule",
        required=True,
        help="5-field cron, @hourly/@daily/@weekly/@monthly or '@every 90s|5m|1h30m', "
        "optionally prefixed 'CRON_TZ=Zone ' (default zone: cron.timezone)",
    )
    add.add_argument("--prompt", required=True, help="what the agent is asked at each run")
    add.add_argument(
        "--deliver-to",
        required=True,
        metavar="TRANSPORT:RECIPIENT",
        help="the chat the reply goes to, e.g. telegram:42",
    )
    add.add_argument(
        "--misfire",
        choices=["run_once", "skip"],
        default="run_once",
        help="after downtime: run a missed job once or skip it (default: run_once)",
    )
    add.add_argument("--disabled", action="store_true", help="save it switched off (default: on)")
    add.add_argument(
        "--agent", default="default", metavar="NAME", help="the agent it runs on (default: default)"
    )
    add.set_defaults(func="cron:add")
    csub.add_parser("list", help="jobs, their next run and last status").set_defaults(
        func="cron:list_jobs"
    )
    for verb, helptext in (
        ("remove", "delete a job and its history"),
        ("enable", "switch a job on (its next run counts from now)"),
        ("disable", "switch a job off"),
        ("run", "run a job once, now; the reply goes out through the outbox"),
    ):
        one = csub.add_parser(verb, help=helptext)
        one.add_argument("job", metavar="NAME|ID", help="the job's name or id (see cron list)")
        one.set_defaults(func="cron:one", verb=verb)

    pair = sub.add_parser("pair", help="admit strangers who asked with a pairing code")
    psub = pair.add_subparsers(dest="action", metavar="ACTION", required=True)
    psub.add_parser("list", help="codes waiting for approval").set_defaults(func="pair:list_codes")
    approve = psub.add_parser("approve", help="admit the sender behind a code")
    approve.add_argument("code", help="the code the stranger was given (see pair list)")
    approve.set_defaults(func="pair:approve")
    reject = psub.add_parser("reject", help="drop a code; its sender gets no new one for a day")
    reject.add_argument("code", help="the code the stranger was given (see pair list)")
    reject.set_defaults(func="pair:reject")

    web = sub.add_parser("web", help="the web face: log-in links, password hashes, API keys")
    wsub = web.add_subparsers(dest="action", metavar="ACTION", required=True)
    wsub.add_parser(
        "link", help="print a one-time link that logs the owner in (valid 15 minutes)"
    ).set_defaults(func="web:link")
    wsub.add_parser(
        "password", help="read a password (twice) and print its hash for web.password_hash"
    ).set_defaults(func="web:password")
    wsub.add_parser("key", help="print a new random key for web.api_keys").set_defaults(
        func="web:key"
    )

    sub.add_parser("version", help="print the version").set_defaults(func="status:version")
    reload = sub.add_parser(
        "reload",
        help="apply the changed config file to the running daemon (as SIGHUP does); a "
        "broken file changes nothing and names the key",
    )
    reload.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the daemon's answer (default: 30)",
    )
    reload.set_defaults(func="reload:reload")
    sub.add_parser(
        "status", help="the provider, the store and its counts, and whether a daemon runs"
    ).set_defaults(func="status:status")
    doctor = sub.add_parser(
        "doctor", help="check the config, the store and the provider; exit 1 on a failure"
    )
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="repair what can be repaired safely, saying what changed (default: only report)",
    )
    doctor.set_defaults(func="doctor:doctor")

    # -- init ---------------------------------------------------------------------------------
    init = sub.add_parser(
        "init",
        help="set up a config: provider, one transport, the owner",
        description="Write a commented config file (mode 0600) after checking the model key "
        "and the transport's credentials; the owner is admitted by the first message they "
        "send the bot (WhatsApp: the phone that links it). --add puts one more transport in "
        "an existing file. Flags answer the questions; with --yes nothing is asked.",
    )
    init.add_argument(
        "--transport",
        choices=[*_INIT_TRANSPORTS, "none"],
        help="where people talk to it (default: asked; with --yes, telegram when a bot token "
        "is given, else none); credentials come from flags or the environment",
    )
    init.add_argument(
        "--add",
        metavar="TRANSPORT",
        choices=_INIT_TRANSPORTS,
        help="add this transport to the existing config, keeping its comments: "
        + ", ".join(_INIT_TRANSPORTS)
        + " (default: write a new config)",
    )
    init.add_argument(
        "--provider",
        choices=["anthropic", "openai", "openrouter", "ollama", "claudecli"],
        help="the model provider (default: asked; with --yes, the first usable of a key in "
        "ANTHROPIC_API_KEY or OPENAI_API_KEY, the claude CLI on PATH, a local Ollama)",
    )
    init.add_argument(
        "--model", metavar="NAME", help="the model (default: asked, else the provider's default)"
    )
    init.add_argument(
        "--api-key",
        metavar="KEY",
        help="the provider's key (default: asked, or with --yes read from ANTHROPIC_API_KEY, "
        "OPENAI_API_KEY or OPENROUTER_API_KEY; prefer those: other users can see arguments)",
    )
    init.add_argument(
        "--base-url",
        metavar="URL",
        help="the provider's API address, e.g. an OpenAI-compatible server (default: asked "
        "for openai; ROUSSEAU_<PROVIDER>_BASE_URL; else the provider's own)",
    )
    init.add_argument(
        "--telegram-token",
        metavar="TOKEN",
        help="the bot token from @BotFather (default: asked, or with --yes read from "
        "TELEGRAM_BOT_TOKEN; none: no transport)",
    )
    init.add_argument(
        "--telegram-base-url",
        metavar="URL",
        help="the Bot API's address, for a local Bot API server (default: "
        "ROUSSEAU_TELEGRAM_BASE_URL, else Telegram's own)",
    )
    init.add_argument(
        "--allow",
        metavar="ID",
        action="append",
        default=[],
        help="a sender id to admit and make an approval owner (Telegram: a user id); "
        "repeatable (default: whoever sends the bot the first message, once you confirm)",
    )
    init.add_argument(
        "--wait",
        metavar="SECONDS",
        type=float,
        default=300.0,
        help="how long to wait for that first message (default: 300)",
    )
    init.add_argument(
        "--yes",
        action="store_true",
        help="ask nothing: take flags and environment, fail if something is missing "
        "(default: ask at the terminal)",
    )
    init.add_argument(
        "--force", action="store_true", help="replace an existing config file (default: refuse)"
    )
    init.add_argument(
        "--no-check",
        action="store_true",
        help="skip checking the key and the token with one request each (default: check)",
    )
    init.set_defaults(func="init:init")

    # -- service ------------------------------------------------------------------------------
    service = sub.add_parser("service", help="run the daemon as a systemd service")
    vsub = service.add_subparsers(dest="action", metavar="ACTION", required=True)
    scope = argparse.ArgumentParser(add_help=False)
    which = scope.add_mutually_exclusive_group()
    which.add_argument(
        "--user",
        dest="system",
        action="store_false",
        default=None,
        help="your own systemd user service (default unless run as root)",
    )
    which.add_argument(
        "--system",
        dest="system",
        action="store_true",
        default=None,
        help="a system service, run as the user rousseau (default when run as root)",
    )
    vinstall = vsub.add_parser(
        "install",
        parents=[scope],
        help="write the hardened unit (this Python, this config) and enable it",
    )
    vinstall.add_argument(
        "--force", action="store_true", help="replace an installed unit that differs (default: no)"
    )
    vinstall.add_argument(
        "--dry-run",
        "--print",
        dest="dry_run",
        action="store_true",
        help="print the unit and change nothing (default: write and enable it)",
    )
    for verb, helptext in (
        ("uninstall", "stop and disable the service and remove its unit"),
        ("start", "start the service (waits until every transport has started)"),
        ("stop", "stop the service (in-flight turns get shutdown_grace to finish)"),
        ("restart", "restart the service, e.g. after an upgrade or a config change"),
        ("status", "the service's state and latest log lines (systemctl status)"),
    ):
        vsub.add_parser(verb, parents=[scope], help=helptext)
    vlogs = vsub.add_parser("logs", parents=[scope], help="the service's journal (journalctl)")
    vlogs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines (default: no)"
    )
    vlogs.add_argument(
        "-n", "--lines", type=int, default=100, help="how many recent lines (default: 100)"
    )
    service.set_defaults(func="service:service")

    # -- send ---------------------------------------------------------------------------------
    send = sub.add_parser("send", help="send one message through a transport's outbox")
    send.add_argument("target", metavar="TRANSPORT:RECIPIENT", help="e.g. telegram:42")
    send.add_argument(
        "text",
        nargs="?",
        default="",
        help="the message (a file's caption); '-' reads it from standard input (default: none)",
    )
    send.add_argument(
        "--file",
        metavar="PATH",
        help="send this file, the text as its caption (default: text only)",
    )
    send.set_defaults(func="send:send")

    # -- import-go ----------------------------------------------------------------------------
    go = sub.add_parser(
        "import-go", help="copy sessions and cron jobs from a rousseau-agent (Go) database"
    )
    go.add_argument("path", metavar="PATH", help="the Go daemon's sessions.db")
    go.set_defaults(func="import_go:import_go")

    # -- backup ---------------------------------------------------------------------------------
    backup = sub.add_parser(
        "backup", help="one file with the state, media, key stores and config; check; restore"
    )
    bsub = backup.add_subparsers(dest="backup_command", required=True)
    made = bsub.add_parser("create", help="make a backup (the daemon may be running)")
    made.add_argument("path", nargs="?", help="the file to write (default: in backup.dir)")
    made.add_argument(
        "--with-secrets",
        action="store_true",
        help="keep the config's secrets in it (default: replaced by env: references; the "
        "file is 0600 either way)",
    )
    made.set_defaults(func="backup:create")
    checked = bsub.add_parser("verify", help="check every part of a backup and count it")
    checked.add_argument("path", help="the backup file")
    checked.set_defaults(func="backup:verify")
    back = bsub.add_parser(
        "restore", help="restore into a new state file or an empty database (no daemon on it)"
    )
    back.add_argument("path", help="the backup file")
    back.add_argument("--state", metavar="FILE", help="the new SQLite file (default: state.path)")
    back.add_argument(
        "--database", metavar="URL", help="an empty PostgreSQL database (default: state.url)"
    )
    back.set_defaults(func="backup:restore")

    # -- migrate-state ------------------------------------------------------------------------
    move = sub.add_parser(
        "migrate-state",
        help="copy the SQLite store into an empty PostgreSQL database (see docs/cluster.md)",
    )
    move.add_argument(
        "--to", required=True, metavar="URL", help="postgresql://user:password@host:port/db"
    )
    move.set_defaults(func="migrate_state:migrate_state")

    _global_options_anywhere(parser)
    return parser


def _global_options_anywhere(parser: argparse.ArgumentParser) -> None:
    """Accept --config and --debug after the subcommand too (`rousseau cron list --config X`),
    and give each subcommand's --help its one-line description."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                if child.description is None:
                    child.description = helps.get(name)
                child.add_argument(
                    "--config", metavar="PATH", default=argparse.SUPPRESS, help=argparse.SUPPRESS
                )
                child.add_argument(
                    "--debug",
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                )
                _global_options_anywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    # pydantic looks for plugins in the entry points of every installed package when it
    # builds its first validator; the command line uses none, and the scan is a tenth of
    # the daemon's start. (The library leaves it to its users.)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    debug = False
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
            if args.version:
                args.func = "status:version"
        except SystemExit as exc:  # --help, or a usage error argparse has printed
            sys.stdout.flush()
            return exc.code if isinstance(exc.code, int) else 2
        debug = args.debug
        target: str | None = getattr(args, "func", None)
        if target is None:
            parser.print_help()
            code = 0
        else:
            module, _, name = target.partition(":")
            func: Handler = getattr(importlib.import_module(f"rousseau.cli.{module}"), name)
            code = func(args)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        if debug and not isinstance(exc, KeyboardInterrupt | BrokenPipeError):
            raise
        return _ended(exc)


def _ended(exc: BaseException) -> int:
    """One line for whatever ended a command, and its exit code; never a traceback."""
    from rousseau.agent.errors import ConfigError, RousseauError

    cause = common.first_cause(exc)
    if isinstance(cause, KeyboardInterrupt):
        return 130
    if isinstance(cause, BrokenPipeError):  # `rousseau status | head -1`: quiet, as cat is
        _mute_stdout()
        return 141  # 128 + SIGPIPE, what a shell shows for a tool its pipe ended
    if isinstance(cause, ConfigError):
        common.fail(f"config error: {cause}")
        return 2
    if isinstance(cause, RousseauError):
        common.fail(str(cause))
        return 1
    common.fail(f"unexpected {type(cause).__name__}: {cause} (traceback in {_keep_traceback(exc)})")
    return 1


def _mute_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _keep_traceback(exc: BaseException) -> str:
    """Write the full traceback (secrets masked) where the user can find it; its path."""
    import tempfile
    import time
    import traceback
    from pathlib import Path

    from rousseau.log import Redactor
    from rousseau.private import private_folder

    text = "".join(traceback.format_exception(exc))
    text = (common.redactor or Redactor()).redact(text)
    for folder in (common.state_folder(), Path(tempfile.gettempdir())):
        path = folder / "rousseau-error.log"
        try:
            private_folder(folder)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as out:
                out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n{text}\n")
            return str(path)
        except OSError:
            continue
    return "nowhere: the state folder and the temporary folder are not writable"
