"""The `rousseau` command line: the parser alone; each command lives in its own module.

Handlers are named "module:function" and imported when chosen, so `--help` and the parser
load only argparse; each command imports what it uses.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence

from rousseau.cli.common import fail

Handler = Callable[[argparse.Namespace], int]


TRANSPORT_LABELS = {
    "telegram": "Telegram",
    "slack": "Slack",
    "discord": "Discord",
    "signal": "Signal",
    "matrix": "Matrix",
    "whatsapp": "WhatsApp",
    "imessage": "iMessage",
    "email": "email",
}


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
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = sub.add_parser("chat", help="chat with the agent in this terminal")
    chat.add_argument("--session", metavar="ID", help="continue (or create) this session")
    chat.add_argument("-m", "--message", metavar="TEXT", help="send one message, print the reply")
    chat.set_defaults(func="chat:chat")

    session = sub.add_parser("session", help="list, search, show or delete stored sessions")
    ssub = session.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = ssub.add_parser("list", help="recent sessions")
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(func="session:list_sessions")
    search = ssub.add_parser("search", help="find messages containing text")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=20)
    search.set_defaults(func="session:search")
    show = ssub.add_parser("show", help="print a session's messages")
    show.add_argument("id")
    show.set_defaults(func="session:show")
    delete = ssub.add_parser("delete", help="delete a session and its messages")
    delete.add_argument("id")
    delete.add_argument("--yes", action="store_true", help="really delete")
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

    sub.add_parser(
        "mcp", help="serve the tools and the stored conversations over MCP (stdio)"
    ).set_defaults(func="mcp:mcp")
    audit = sub.add_parser("audit", help="every tool call: who decided, and what came of it")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--session", metavar="ID", help="only this session's calls")
    audit.set_defaults(func="audit:audit")

    skills = sub.add_parser("skills", help="the skills in agent.skills_dir")
    ksub = skills.add_subparsers(dest="action", metavar="ACTION", required=True)
    ksub.add_parser("list", help="each skill, its triggers and description").set_defaults(
        func="skills:list_skills"
    )
    kshow = ksub.add_parser("show", help="a skill's text")
    kshow.add_argument("name")
    kshow.set_defaults(func="skills:show")

    cron = sub.add_parser("cron", help="scheduled prompts delivered to a chat")
    csub = cron.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = csub.add_parser("add", help="add a job (checked before it is saved)")
    add.add_argument("--name", required=True)
    add.add_argument(
        "--schedule",
        required=True,
        help="5-field cron, @hourly/@daily/@weekly/@monthly or '@every 90s|5m|1h30m', "
        "optionally prefixed 'CRON_TZ=Zone '",
    )
    add.add_argument("--prompt", required=True, help="what the agent is asked at each run")
    add.add_argument(
        "--deliver-to", required=True, metavar="TRANSPORT:RECIPIENT", help="e.g. telegram:42"
    )
    add.add_argument(
        "--misfire",
        choices=["run_once", "skip"],
        default="run_once",
        help="after downtime: run a missed job once (default) or skip it",
    )
    add.add_argument("--disabled", action="store_true", help="save it switched off")
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
        one.add_argument("job", metavar="NAME|ID")
        one.set_defaults(func="cron:one", verb=verb)

    pair = sub.add_parser("pair", help="admit strangers who asked with a pairing code")
    psub = pair.add_subparsers(dest="action", metavar="ACTION", required=True)
    psub.add_parser("list", help="codes waiting for approval").set_defaults(func="pair:list_codes")
    approve = psub.add_parser("approve", help="admit the sender behind a code")
    approve.add_argument("code")
    approve.set_defaults(func="pair:approve")
    reject = psub.add_parser("reject", help="drop a code; its sender gets no new one for a day")
    reject.add_argument("code")
    reject.set_defaults(func="pair:reject")

    sub.add_parser("version", help="print the version").set_defaults(func="status:version")
    sub.add_parser(
        "status", help="which provider, which store, how many sessions and tokens"
    ).set_defaults(func="status:status")
    sub.add_parser(
        "doctor", help="check the config, the store and the provider; exit 1 on a failure"
    ).set_defaults(func="doctor:doctor")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    target: str | None = getattr(args, "func", None)
    if target is None:
        parser.print_help()
        return 0
    module, _, name = target.partition(":")
    func: Handler = getattr(importlib.import_module(f"rousseau.cli.{module}"), name)
    from rousseau.agent.errors import ConfigError, RousseauError

    try:
        return func(args)
    except ConfigError as exc:
        if args.debug:
            raise
        fail(f"config error: {exc}")
        return 2
    except RousseauError as exc:
        if args.debug:
            raise
        fail(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130
