"""The `rousseau` command. Only argparse loads at start-up; each command imports what it uses."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rousseau.config import Config

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
    chat.set_defaults(func=_chat)

    session = sub.add_parser("session", help="list, search, show or delete stored sessions")
    ssub = session.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = ssub.add_parser("list", help="recent sessions")
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(func=_session_list)
    search = ssub.add_parser("search", help="find messages containing text")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=20)
    search.set_defaults(func=_session_search)
    show = ssub.add_parser("show", help="print a session's messages")
    show.add_argument("id")
    show.set_defaults(func=_session_show)
    delete = ssub.add_parser("delete", help="delete a session and its messages")
    delete.add_argument("id")
    delete.add_argument("--yes", action="store_true", help="really delete")
    delete.set_defaults(func=_session_delete)

    run = sub.add_parser("run", help="the daemon: every configured transport")
    run.set_defaults(func=_run, only=None)
    for name, label in TRANSPORT_LABELS.items():
        alone = sub.add_parser(name, help=f"run the {label} transport alone")
        alone.set_defaults(func=_run, only=name)
        if name == "whatsapp":
            alone.add_argument(
                "action", nargs="?", choices=["login"], help="login: pair by QR code, then exit"
            )

    sub.add_parser(
        "mcp", help="serve the tools and the stored conversations over MCP (stdio)"
    ).set_defaults(func=_mcp)
    audit = sub.add_parser("audit", help="every tool call: who decided, and what came of it")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--session", metavar="ID", help="only this session's calls")
    audit.set_defaults(func=_audit)

    skills = sub.add_parser("skills", help="the skills in agent.skills_dir")
    ksub = skills.add_subparsers(dest="action", metavar="ACTION", required=True)
    ksub.add_parser("list", help="each skill, its triggers and description").set_defaults(
        func=_skills_list
    )
    kshow = ksub.add_parser("show", help="a skill's text")
    kshow.add_argument("name")
    kshow.set_defaults(func=_skills_show)

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
    add.set_defaults(func=_cron_add)
    csub.add_parser("list", help="jobs, their next run and last status").set_defaults(
        func=_cron_list
    )
    for verb, helptext in (
        ("remove", "delete a job and its history"),
        ("enable", "switch a job on (its next run counts from now)"),
        ("disable", "switch a job off"),
        ("run", "run a job once, now; the reply goes out through the outbox"),
    ):
        one = csub.add_parser(verb, help=helptext)
        one.add_argument("job", metavar="NAME|ID")
        one.set_defaults(func=_cron_one, verb=verb)

    pair = sub.add_parser("pair", help="admit strangers who asked with a pairing code")
    psub = pair.add_subparsers(dest="action", metavar="ACTION", required=True)
    psub.add_parser("list", help="codes waiting for approval").set_defaults(func=_pair_list)
    approve = psub.add_parser("approve", help="admit the sender behind a code")
    approve.add_argument("code")
    approve.set_defaults(func=_pair_approve)
    reject = psub.add_parser("reject", help="drop a code; its sender gets no new one for a day")
    reject.add_argument("code")
    reject.set_defaults(func=_pair_reject)

    sub.add_parser("version", help="print the version").set_defaults(func=_version)
    sub.add_parser(
        "status", help="which provider, which store, how many sessions and tokens"
    ).set_defaults(func=_status)
    sub.add_parser(
        "doctor", help="check the config, the store and the provider; exit 1 on a failure"
    ).set_defaults(func=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    from rousseau.agent.errors import ConfigError, RousseauError

    try:
        return func(args)
    except ConfigError as exc:
        if args.debug:
            raise
        _fail(f"config error: {exc}")
        return 2
    except RousseauError as exc:
        if args.debug:
            raise
        _fail(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> None:
    print(f"rousseau: {message}", file=sys.stderr)


def _config(args: argparse.Namespace, *, quiet: bool = True) -> Config:
    """Load the config and set up logging (warnings only for interactive commands)."""
    from rousseau.config import load_config
    from rousseau.log import configure_logging

    config = load_config(args.config)
    level = "debug" if args.debug else ("warning" if quiet else config.log.level)
    configure_logging(level, config.log.format, config.secrets())
    return config


# -- chat ------------------------------------------------------------------------------------


def _chat(args: argparse.Namespace) -> int:
    import anyio

    from rousseau.providers import build_provider, detect_provider
    from rousseau.state import Store

    config = _config(args)
    name, _why = detect_provider(config)
    with Store(config.state.path) as store:
        provider = build_provider(config, name, store=store)
        if args.message is not None:
            return anyio.run(_chat_once, config, provider, store, args)
        anyio.run(_chat_interactive, config, provider, store, args, name)
        return 0


async def _open_session(store: Any, session_id: str | None) -> Any:
    if session_id:
        return await store.load_or_create(session_id)
    return await store.create_session()


async def _chat_once(config: Config, provider: Any, store: Any, args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError
    from rousseau.app import connected_agent
    from rousseau.transports.terminal import default_screen, run_turn

    session = await _open_session(store, args.session)
    screen = default_screen(interactive=False)
    try:
        async with connected_agent(config, provider, store) as agent:
            await run_turn(agent, session, args.message, screen)
    except RousseauError as exc:
        _fail(str(exc))
        return 1
    finally:
        await _close(provider)
    return 0


async def _chat_interactive(
    config: Config, provider: Any, store: Any, args: argparse.Namespace, name: str
) -> None:
    from rousseau.app import connected_agent
    from rousseau.transports.terminal import (
        HELP,
        LineReader,
        TerminalApproval,
        default_screen,
        interactive,
    )

    screen = default_screen(interactive=True)
    reader = LineReader()
    session = await _open_session(store, args.session)
    model = getattr(provider, "model", "")
    banner = screen.paint.dim(
        f"rousseau · {name} {model} · session {session.id}\n{HELP} Ctrl-C stops a reply."
    )
    ask = TerminalApproval(reader, screen)
    try:
        async with connected_agent(config, provider, store, ask=ask) as agent:
            await interactive(agent, store, session, screen, reader, banner)
    finally:
        await _close(provider)


async def _close(provider: Any) -> None:
    aclose = getattr(provider, "aclose", None)
    if aclose is not None:
        import anyio

        with anyio.CancelScope(shield=True):
            await aclose()


# -- daemon ---------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from rousseau.daemon import run

    config = _config(args, quiet=False)
    if getattr(args, "action", None) == "login":
        return _whatsapp_login(config)
    return run(config, only=args.only)


def _whatsapp_login(config: Config) -> int:
    from pathlib import Path

    import anyio

    from rousseau.config import WhatsAppConfig
    from rousseau.transports.whatsapp import login

    store = Path((config.whatsapp or WhatsAppConfig()).store).expanduser()
    store.parent.mkdir(parents=True, exist_ok=True)
    print("Scan the QR code with WhatsApp on your phone: Settings > Linked devices > Link a device")
    anyio.run(login, str(store))
    print(f"paired; the session is kept in {store}")
    return 0


def _pair_list(args: argparse.Namespace) -> int:
    import datetime

    from rousseau.approvals import visible
    from rousseau.state.daemon_state import DaemonState

    with _store(args) as store:
        codes = DaemonState(store).pairing_codes_sync()
    if not codes:
        print("no pairing codes waiting")
        return 0
    rows = [["CODE", "TRANSPORT", "SENDER", "CHAT", "ASKED", "EXPIRES"]]
    for c in codes:
        # ids come from strangers: shown with nothing invisible in them
        rows.append([c.code, c.transport, visible(c.sender_id, 40, 20), visible(c.chat_id, 40, 20)])
        rows[-1] += [
            datetime.datetime.fromtimestamp(t).strftime("%H:%M")
            for t in (c.created_at, c.expires_at)
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _pair_approve(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.approvals import visible
    from rousseau.state.daemon_state import DaemonState

    with _store(args) as store:
        approved = DaemonState(store).approve_sync(args.code)
    if approved is None:
        raise StoreError(f"no such pairing code (or it expired): {args.code}")
    print(f"admitted {approved.transport} sender {visible(approved.sender_id)}")
    return 0


def _pair_reject(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.approvals import visible
    from rousseau.state.daemon_state import REJECTED_FOR, DaemonState

    with _store(args) as store:
        rejected = DaemonState(store).reject_sync(args.code)
    if rejected is None:
        raise StoreError(f"no such pairing code (or it expired): {args.code}")
    print(
        f"rejected {rejected.transport} sender {visible(rejected.sender_id)}"
        f" (no new code for them for {REJECTED_FOR / 3600:g} h)"
    )
    return 0


# -- audit -----------------------------------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    with _store(args) as store:
        calls = store.tool_calls_sync(args.limit, args.session)
    if not calls:
        print("no tool calls recorded")
    for c in reversed(calls):
        why = f" ({c.reason})" if c.reason and c.decision != "allow" else ""
        print(
            f"{_when(c.started_at)}  {c.session_id:<12} {c.tool:<14} {c.decision:<7}"
            f" {c.outcome:<6} {c.duration * 1000:7.0f} ms  by {c.decided_by or '-'}"
            f"  input {c.input_digest}{why}"
        )
    return 0


# -- mcp -------------------------------------------------------------------------------------


def _mcp(args: argparse.Namespace) -> int:
    """An MCP server on stdin/stdout (logs go to stderr, so the protocol stays clean)."""
    from rousseau.agent import MissingExtraError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtraError("rousseau mcp", "mcp") from None
    from rousseau.app import build_approver, build_registry
    from rousseau.mcp.server import serve

    config = _config(args)
    with _store(args) as store:
        serve(build_registry(config), build_approver(config), store)
    return 0


# -- skills ----------------------------------------------------------------------------------


def _skills_list(args: argparse.Namespace) -> int:
    from rousseau.skills import Skills

    skills = Skills(_config(args, quiet=False).agent.skills_dir)
    found = skills.load()
    if not found:
        print(f"no skills in {skills.folder}")
    for skill in found:
        triggers = ", ".join(skill.triggers) or "(none: never used)"
        print(f"{skill.name}  [{triggers}]  {skill.description}")
    return 0


def _skills_show(args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError
    from rousseau.skills import Skills

    skill = Skills(_config(args).agent.skills_dir).get(args.name)
    if skill is None:
        raise RousseauError(f"no skill named {args.name!r} (see: rousseau skills list)")
    print(f"# {skill.name} ({skill.path})\ntriggers: {', '.join(skill.triggers)}\n")
    print(skill.body)
    return 0


# -- cron ------------------------------------------------------------------------------------


def _cron_add(args: argparse.Namespace) -> int:
    from rousseau.cron import CronJobs, describe

    config = _config(args)
    transport = args.deliver_to.partition(":")[0]
    with _store(args, config) as store:
        job = CronJobs(store).add_sync(
            args.name,
            args.schedule,
            args.prompt,
            args.deliver_to,
            timezone=config.cron.timezone,
            misfire=args.misfire,
            enabled=not args.disabled,
        )
    print(f"added {describe(job)}")
    if getattr(config, transport, None) is None:
        print(f"note: {transport} is not configured yet; replies wait until it is", file=sys.stderr)
    return 0


def _cron_list(args: argparse.Namespace) -> int:
    from rousseau.cron import CronJobs, describe

    with _store(args) as store:
        jobs = CronJobs(store).all_sync()
    if not jobs:
        print("no cron jobs (add one: rousseau cron add --help)")
    for job in jobs:
        print(describe(job))
    return 0


def _cron_one(args: argparse.Namespace) -> int:
    from rousseau.cron import CronJobs, describe

    config = _config(args)
    with _store(args, config) as store:
        jobs = CronJobs(store)
        if args.verb == "remove":
            print(f"removed {jobs.remove_sync(args.job).name}")
        elif args.verb in ("enable", "disable"):
            print(describe(jobs.set_enabled_sync(args.job, args.verb == "enable")))
        else:
            return _cron_run(config, store, jobs.get_sync(args.job))
    return 0


def _cron_run(config: Config, store: Any, job: Any) -> int:
    """Run the turn here; a running daemon (or the next one) delivers the reply."""
    import anyio

    from rousseau.cron import CronJobs, CronRunner, Scheduler
    from rousseau.policy import chat_policies as policies
    from rousseau.providers import build_provider, detect_provider
    from rousseau.router import RateLimiter, Router

    name, _why = detect_provider(config)
    provider = build_provider(config, name, store=store)

    async def go() -> int:
        from rousseau.app import build_agent

        agent = build_agent(config, provider, store)
        try:
            transports = _target_transport(config, job.deliver_to.partition(":")[0])
            router = Router(
                agent=agent,
                store=store,
                transports=transports,
                policies=policies(config),  # their reply headers
                rate_limiter=RateLimiter((1, 1.0), {}, 1),
            )
            runner = CronRunner(
                agent=agent,
                store=store,
                notify=router.notify,
                timeout=config.cron.timeout,
                notify_failures=config.cron.notify_failures,
            )
            outcome = await Scheduler(jobs=CronJobs(store), runner=runner).run_now(job)
        finally:
            await _close(provider)
        if outcome.status != "ok":
            _fail(f"cron job {job.name} failed: {outcome.error}")
            return 1
        print(outcome.text)
        print(f"(queued for {job.deliver_to}; a running daemon delivers it)", file=sys.stderr)
        return 0

    return anyio.run(go)


def _target_transport(config: Config, name: str) -> dict[str, Any]:
    """The target's transport, for its length limit when splitting (none if unavailable)."""
    from rousseau.agent import RousseauError
    from rousseau.transports import build_transports

    if getattr(config, name, None) is None:
        return {}
    try:
        return build_transports(config, only=name)
    except RousseauError:
        return {}


# -- sessions --------------------------------------------------------------------------------


def _store(args: argparse.Namespace, config: Config | None = None) -> Any:
    """The store of `config` (loaded from the arguments if not given)."""
    from rousseau.state import Store

    return Store((config or _config(args)).state.path)


def _when(ts: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _session_list(args: argparse.Namespace) -> int:
    with _store(args) as store:
        sessions = store.list_sync(args.limit)
    if not sessions:
        print("no sessions yet")
        return 0
    print(f"{'ID':<14}{'MESSAGES':>9}  {'UPDATED':<17} TITLE")
    for s in sessions:
        print(f"{s.id:<14}{s.message_count:>9}  {_when(s.updated_at):<17} {s.title}")
    return 0


def _session_search(args: argparse.Namespace) -> int:
    with _store(args) as store:
        hits = store.search_sync(args.query, args.limit)
    if not hits:
        print(f"no messages contain {args.query!r}")
        return 0
    for h in hits:
        text = " ".join(h.text.split())
        print(f"{h.session_id}  {_when(h.created_at)}  {h.role.value}: {text[:120]}")
    return 0


def _session_show(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.transports.terminal import describe_call

    with _store(args) as store:
        session = store.load_sync(args.id)
        info = store.info_sync(args.id)
    if session is None or info is None:
        raise StoreError(f"no such session: {args.id}")
    for message in session.messages:
        for c in message.content:
            if c.text:
                print(f"{message.role.value}: {c.text}")
            elif c.tool_use is not None:
                print(f"  > {describe_call(c.tool_use)}")
            elif c.tool_result is not None:
                first = (c.tool_result.content.strip().splitlines() or [""])[0][:100]
                print(f"  {'!' if c.tool_result.is_error else '='} {first}")
    print(f"-- {info.message_count} messages; tokens: {_tokens(info.usage)}")
    return 0


def _tokens(usage: Any) -> str:
    return (
        f"{usage.input_tokens:,} in, {usage.output_tokens:,} out, "
        f"{usage.cache_read_tokens:,} cache read, {usage.cache_write_tokens:,} cache write"
    )


def _session_delete(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError

    if not args.yes:
        _fail(f"this deletes session {args.id} and all its messages; add --yes to confirm")
        return 2
    with _store(args) as store:
        deleted = store.delete_sync(args.id)
    if not deleted:
        raise StoreError(f"no such session: {args.id}")
    print(f"deleted session {args.id}")
    return 0


# -- version and doctor ----------------------------------------------------------------------


def _version(args: argparse.Namespace) -> int:
    from rousseau import __version__

    print(f"rousseau {__version__}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from rousseau.agent import ConfigError
    from rousseau.providers import detect_provider
    from rousseau.state import Store

    config = _config(args)
    print(f"config     {config.source or 'no file; defaults and environment'}")
    try:
        name, why = detect_provider(config)
        model = getattr(getattr(config, name), "model", "")
        print(f"provider   {name} {model} ({why})")
    except ConfigError as exc:
        print(f"provider   none: {exc}")
    if config.fallback:
        print(f"fallback   {', '.join(config.fallback)}")
    with Store(config.state.path) as store:
        count, usage = store.totals_sync()
    print(f"store      {store.path}: {count} sessions")
    print(f"tokens     {_tokens(usage)}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError

    failed = False

    def report(ok: bool, what: str, detail: str) -> None:
        nonlocal failed
        failed = failed or not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what:<10} {detail}")

    try:
        config = _config(args)
    except RousseauError as exc:
        report(False, "config", str(exc))
        return 1
    report(True, "config", config.source or "no file; defaults and environment")
    _doctor_store(config, report)
    _doctor_workspace(config, report)
    _doctor_sandbox(config, report)
    _doctor_provider(config, report)
    _doctor_transports(config, report)
    return 1 if failed else 0


def _doctor_sandbox(config: Config, report: Callable[[bool, str, str], None]) -> None:
    from pathlib import Path

    from rousseau.app import build_sandbox
    from rousseau.tools import SandboxError, Workspace

    sandbox = build_sandbox(config)
    if sandbox is None:
        report(True, "sandbox", "none: bash can reach whatever this user can (agent.sandbox)")
        return
    try:
        workspace = Workspace(Path(config.agent.workspace).expanduser()).root
        report(True, "sandbox", sandbox.check(workspace))
    except (SandboxError, OSError) as exc:
        report(False, "sandbox", str(exc))


def _doctor_transports(config: Config, report: Callable[[bool, str, str], None]) -> None:
    """One harmless call per configured transport, proving its credentials work."""
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.transports import TRANSPORTS, build_transports

    if not any(getattr(config, name) is not None for name in TRANSPORTS):
        return
    try:
        transports = build_transports(config)
    except RousseauError as exc:
        report(False, "transport", str(exc))
        return
    for name, transport in transports.items():

        async def run(transport: Any = transport) -> str:
            try:
                with anyio.fail_after(20):
                    return str(await transport.check())
            finally:
                await transport.aclose()

        try:
            report(True, name, f"connected as {anyio.run(run)}")
        except RousseauError as exc:  # ours name the key to fix, secrets masked
            report(False, name, str(exc))
        except Exception as exc:
            report(False, name, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def _doctor_store(config: Config, report: Callable[[bool, str, str], None]) -> None:
    from rousseau.agent import RousseauError
    from rousseau.state import Store

    try:
        with Store(config.state.path) as store:
            store.check_writable_sync()
        report(True, "store", f"{store.path} is writable")
    except RousseauError as exc:
        report(False, "store", str(exc))


def _doctor_workspace(config: Config, report: Callable[[bool, str, str], None]) -> None:
    import os
    from pathlib import Path

    path = Path(config.agent.workspace).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        ok = os.access(path, os.W_OK)
        report(ok, "workspace", f"{path}" + ("" if ok else " is not writable"))
    except OSError as exc:
        report(False, "workspace", f"{path}: {exc.strerror}")


def _doctor_provider(config: Config, report: Callable[[bool, str, str], None]) -> None:
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.providers import build_provider, detect_provider

    try:
        name, why = detect_provider(config)
        provider = build_provider(config, name)
    except RousseauError as exc:
        report(False, "provider", str(exc))
        return
    report(True, "chosen", f"{name}: {why}")

    async def check() -> None:
        probe = getattr(provider, "check", None)
        try:
            if probe is not None:
                with anyio.fail_after(20):
                    await probe()
        finally:
            await _close(provider)

    try:
        anyio.run(check)
        report(True, "provider", f"{name} ({why}) answers")
    except TimeoutError:
        report(False, "provider", f"{name}: no answer within 20 s")
    except RousseauError as exc:
        report(False, "provider", str(exc))
