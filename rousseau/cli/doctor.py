"""`rousseau doctor`: checks of the config, the store, the provider and each transport."""

from __future__ import annotations

import argparse
import re
import socket
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import close_provider, load, with_state
from rousseau.messages import DEFAULT_AGENT
from rousseau.private import private_folder

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.state.backend import Backend


# What a sender id looks like where a platform's ids have one shape (the allowlist holds
# senders: a username or a phone number where a number id belongs admits nobody).
SENDER_SHAPES = {
    "telegram": (re.compile(r"^\d+$"), "a number such as 123456789, not a @username"),
    "slack": (re.compile(r"^[UW][A-Z0-9]{2,}$"), "a member id such as U0123ABCD"),
    "discord": (re.compile(r"^\d{15,}$"), "a user id (a long number), not a name"),
    "matrix": (re.compile(r"^@[^:\s]+:\S+$"), "a user id such as @you:example.org"),
    "whatsapp": (re.compile(r"^\d{5,}(@[\w.]+)?$"), "a phone number in digits, no +"),
    "signal": (
        re.compile(r"^(\+\d{5,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"),
        "+15551234567 or an account uuid",
    ),
    "xmpp": (
        re.compile(r"^[^@/\s]+@[^@/\s]+$"),
        "a bare address such as you@example.org (no /resource)",
    ),
    "mattermost": (
        re.compile(r"^[a-z0-9]{26}$"),
        "a user id (26 letters and digits, from the user's profile > Copy user ID), not a name",
    ),
    "feishu": (
        re.compile(r"^ou_[0-9a-f]{32}$"),
        "an open_id (ou_ and 32 hex digits) of this app, not a name, user_id or union_id",
    ),
    "googlechat": (re.compile(r"^users/\d+$"), "users/ and a number, as Chat names a person"),
    "teams": (
        re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
        "a user's Entra object id (a uuid), not a name or an email",
    ),
}


class Report:
    """The doctor's lines: ok, note (worth knowing), warn (a risk taken, not a failure),
    FAIL, and fixed; every line masked, so no secret is printed, not even inside an SDK's
    error text."""

    def __init__(self) -> None:
        self.failed = False

    def __call__(self, ok: bool, what: str, detail: str) -> None:
        self.line("ok" if ok else "FAIL", what, detail)

    def note(self, what: str, detail: str) -> None:
        self.line("note", what, detail)

    def warn(self, what: str, detail: str) -> None:
        self.line("warn", what, detail)

    def fixed(self, what: str, detail: str) -> None:
        self.line("fix", what, detail)

    def line(self, tag: str, what: str, detail: str) -> None:
        from rousseau.cli import common
        from rousseau.log import Redactor

        self.failed = self.failed or tag == "FAIL"
        detail = (common.redactor or Redactor()).redact(" ".join(detail.split()))
        print(f"{tag:<4}  {what:<10} {detail}")


def doctor(args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError

    report = Report()
    try:
        config = load(args)
    except RousseauError as exc:
        report(False, "config", str(exc))
        return 1
    report(True, "config", config.source or "no file; defaults and environment")
    _doctor_config_file(config, report, fix=args.fix)
    _doctor_folders(config, report, fix=args.fix)
    _doctor_store(config, report)
    _doctor_daemon(config, report)
    _doctor_sandbox(config, report)
    _doctor_access(config, report)
    _doctor_agents(config, report)
    _doctor_provider(config, report)
    _doctor_embeddings(config, report)
    _doctor_costs(config, report)
    _doctor_speech(config, report)
    _doctor_transports(config, report)
    return 1 if report.failed else 0


def _doctor_config_file(config: Config, report: Report, *, fix: bool) -> None:
    """Secrets are better kept out of the file (env: or file: references); a file holding
    some must be readable by its owner alone."""
    if not config.source:
        return
    path = Path(config.source)
    from rousseau.config.loading import plain_secrets, well_known_variable

    for key in plain_secrets(path):
        parts = tuple(key.split("."))
        var = well_known_variable(key) or "ROUSSEAU_" + key.upper().replace(".", "_")
        report.warn(
            "secrets",
            f"{key} is written in {path.name} in plain text; keep it elsewhere: "
            f"{key.rpartition('.')[2]}: env:{var} (and set {var} in the service's "
            f"environment), or file:/run/credentials/rousseau.service/{parts[-1]} "
            "(a systemd credential, or a mounted secret's path)",
        )
    mode = path.stat().st_mode & 0o777
    if not mode & 0o077:
        return
    text = path.read_text(errors="replace")
    if not any(secret in text for secret in config.secrets()):
        report.note("config", f"{path} is readable by others (mode {mode:o}); it holds no secret")
        return
    if fix:
        path.chmod(0o600)
        report.fixed("config", f"{path}: mode {mode:o} -> 600 (it holds secrets)")
        return
    report(
        False,
        "config",
        f"{path} holds secrets and others can read it (mode {mode:o}):"
        f" chmod 600 {path} (or rousseau doctor --fix)",
    )


def _doctor_folders(config: Config, report: Report, *, fix: bool) -> None:
    """The state and workspace folders exist (made with --fix, private to this user): the
    daemon makes them at first use, but a service's ReadWritePaths= must exist to start."""
    for what, folder in (
        ("state", Path(config.state.path).expanduser().parent),
        ("workspace", Path(config.agent.workspace).expanduser()),
    ):
        if folder.is_dir():
            continue
        if folder.exists():
            report(False, what, f"{folder} is not a folder")
        elif fix:
            try:
                private_folder(folder)
                report.fixed(what, f"made {folder}")
            except OSError as exc:
                report(False, what, f"cannot make {folder}: {exc.strerror}")
        else:  # made at first use, but a service's sandbox needs it there beforehand
            report.note(what, f"{folder} does not exist yet (rousseau doctor --fix makes it)")


def _doctor_daemon(config: Config, report: Report) -> None:
    """A running daemon, and whether the health port is free for one to start."""
    from rousseau.state.lock import running

    info = running(config.state.path)
    if info is not None:
        report.note(
            "daemon",
            f"running on this database (pid {info.pid}); another `rousseau run` on it"
            " would exit at once",
        )
        return
    if config.health is None:
        return
    host, port = config.health.address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        report(True, "health", f"{config.health.listen} is free")
    except OSError as exc:
        report(False, "health", f"health.listen {config.health.listen}: {exc.strerror or exc}")


def _bash_allowed(config: Config) -> bool:
    """Whether the approver lets bash run without asking anyone."""
    approver = config.agent.approver
    if approver is None:
        return False  # the default rules allow read, grep and memory only
    rules = [*approver.allow, *(r for r in approver.rules if r.action == "allow")]
    return (
        approver.mode == "allow_all"
        or approver.default == "allow"
        or any(r.tool in ("bash", "*") for r in rules)
    )


def _doctor_access(config: Config, report: Report) -> None:
    """Someone can talk to each transport, and its allowlist ids have the platform's shape."""
    for name, section in config.transport_sections().items():
        policy = getattr(section, "policy", "allowlist")
        allowlist = list(getattr(section, "allowlist", []))
        if policy == "allowlist" and not allowlist:
            report(
                False,
                name,
                f"nobody can talk to the bot: {name}.allowlist is empty; run `rousseau init`"
                f" or add your id (the log names each stranger's id: router.ignored_sender)",
            )
            continue
        shape = SENDER_SHAPES.get(name)
        if shape is None:
            continue
        pattern, example = shape
        wrong = [sender for sender in allowlist if not pattern.match(sender)]
        if wrong:
            shown = ", ".join(repr(w) for w in wrong[:3])
            report(False, name, f"{name}.allowlist: {shown} cannot match: an id is {example}")


KNOWN_TOOLS = frozenset(
    {
        *("read", "write", "edit", "grep", "bash", "cron", "send_file"),
        *("web_fetch", "web_search", "browser", "memory", "delegate"),
    }
)
"""The built-in tools an agent's `tools` may name, besides MCP servers' (SERVER__TOOL) and
the tool plugins' (asked for theirs when a name is none of these)."""


def _doctor_agents(config: Config, report: Report) -> None:
    """The routing table: routes that can never match, agents sharing a workspace, tools
    that do not exist (unknown agent names are configuration errors already)."""
    configured = list(config.transport_sections())
    fields = ("transport", "chat", "sender", "thread")
    for i, route in enumerate(config.routes):
        if not any(fnmatchcase(name, route.transport) for name in configured):
            report(False, "routes", f"routes[{i}] can never match: no transport {route.transport}")
            continue
        for j, earlier in enumerate(config.routes[:i]):
            if all(getattr(earlier, f) in ("*", getattr(route, f)) for f in fields):
                report(False, "routes", f"routes[{i}] can never match: routes[{j}] takes it all")
                break
    agents = {name: config.for_agent(name).agent for name in (DEFAULT_AGENT, *config.agents)}
    places = {name: Path(a.workspace).expanduser().resolve() for name, a in agents.items()}
    names = sorted(places)
    for i, one in enumerate(names):
        for other in names[i + 1 :]:
            a, b = places[one], places[other]
            if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                report(
                    False,
                    "agents",
                    f"agents {one} and {other} overlap in their workspaces ({a}, {b}):"
                    " each one's tools could reach the other's files",
                )
    _doctor_tools(config, agents, report)


def _doctor_tools(config: Config, agents: dict[str, Any], report: Report) -> None:
    """Each tool an agent's `tools` names exists (a glob: matches one)."""
    for name, agent in agents.items():
        known: frozenset[str] | set[str] = KNOWN_TOOLS
        for tool in agent.tools or ():
            if "__" in tool or any(fnmatchcase(t, tool) for t in known):
                continue
            if known is KNOWN_TOOLS:
                known = KNOWN_TOOLS | _plugin_tool_names(config, name, agent.workspace)
                if any(fnmatchcase(t, tool) for t in known):
                    continue
            report(False, "agents", f"agent {name}: tools names {tool!r}, no such tool")


def _plugin_tool_names(config: Config, agent: str, workspace: str) -> set[str]:
    """The names of the tools the configured tool plugins make for `agent`."""
    if not any(c.installed.kind == "tool" for c in config.plugins.values()):
        return set()
    from rousseau.assembly.agent import plugin_tools
    from rousseau.tools import Workspace

    return {tool.name for tool in plugin_tools(config, agent, Workspace(workspace))}


def _doctor_sandbox(config: Config, report: Report) -> None:
    from pathlib import Path

    from rousseau.assembly import build_sandbox
    from rousseau.tools import SandboxError, Workspace

    sandbox = build_sandbox(config)
    if sandbox is None and _bash_allowed(config):
        report.warn(
            "sandbox",
            "none, and bash is allowed without asking: it can read and change whatever this"
            " user can (agent.sandbox: bwrap keeps it in the workspace)",
        )
        return
    if sandbox is None:
        report(True, "sandbox", "none: bash, when allowed, reaches whatever this user can")
        return
    try:
        workspace = Workspace(Path(config.agent.workspace).expanduser()).root
        report(True, "sandbox", sandbox.check(workspace))
    except (SandboxError, OSError) as exc:
        report(False, "sandbox", str(exc))


def _doctor_transports(config: Config, report: Report) -> None:
    """One harmless call per configured transport, proving its credentials work."""
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.transports import build_transports
    from rousseau.transports.abilities import Finds

    if not config.transport_sections():
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
        if isinstance(transport, Finds):
            for finding in transport.findings:
                report.warn(name, finding)


def _doctor_store(config: Config, report: Report) -> None:
    from rousseau.agent import RousseauError
    from rousseau.state import Store

    if config.state.url is not None:
        _doctor_postgres(config, report)
        return
    if not Path(config.state.path).expanduser().parent.is_dir():
        return  # said above; opening the store would make the folder
    if _doctor_migrations(config, report):
        return  # opening the store would migrate it: that is the daemon's to do
    try:
        with Store(config.state.path) as store:
            store.check_writable_sync()
        report(True, "store", f"{store.path} is writable")
    except RousseauError as exc:
        report(False, "store", str(exc))


def _doctor_migrations(config: Config, report: Report) -> bool:
    """The store's migrations still to apply (or a schema newer than this code), read
    without changing it; whether the store is better left unopened."""
    import anyio

    from rousseau.agent import StoreError
    from rousseau.state.migrations import pending_in

    try:
        version, pending = anyio.run(pending_in, config)
    except StoreError as exc:
        report(False, "store", str(exc))
        return True
    if version and pending:
        report.note(
            "store",
            f"{len(pending)} migration(s) pending (schema {version} -> {max(pending)}): the "
            "daemon applies them at its next start, after keeping a copy of the store",
        )
        return True
    return False


def _doctor_postgres(config: Config, report: Report) -> None:
    """The shared store reachable, its schema up to date, and how many daemons beat."""
    from rousseau.agent import RousseauError
    from rousseau.state.postgres_daemon import PostgresDaemonState

    if _doctor_migrations(config, report):
        return

    async def reach(backend: Backend) -> str:
        count, _ = await backend.store.totals()
        assert isinstance(backend.state, PostgresDaemonState)
        daemons = await backend.state.daemons()
        return f"PostgreSQL reachable: {count} sessions, {len(daemons)} daemon(s) beating"

    try:
        report(True, "store", with_state(config, reach))
    except RousseauError as exc:
        report(False, "store", str(exc))


def _doctor_embeddings(config: Config, report: Report) -> None:
    """With `embeddings`: the store can keep vectors (sqlite-vec, pgvector), the endpoint
    answers, and how much of the history is embedded. A store that cannot keep them keeps
    keyword recall: a warning, not a failure."""
    section = config.embeddings
    if section is None:
        return
    from rousseau.agent import RousseauError
    from rousseau.providers.embeddings import Embeddings

    async def check(backend: Backend) -> None:
        vectors = backend.vectors
        assert vectors is not None  # open_backend makes them where embeddings is set
        if (why := await vectors.unavailable()) is not None:
            report.warn("embeddings", f"{why}; recall is by keywords only")
            return
        embeddings = Embeddings(section)
        try:
            with anyio.fail_after(20):
                [vector] = await embeddings.embed(["rousseau doctor"])
        finally:
            await embeddings.aclose()
        done, total = await vectors.progress(section.model)
        report(
            True,
            "embeddings",
            f"{section.model} at {section.base_url} answers ({len(vector)} dimensions);"
            f" {done:,} of {total:,} messages embedded",
        )

    import anyio

    try:
        with_state(config, check)
    except TimeoutError:
        report(False, "embeddings", f"{section.base_url}: no answer within 20 s")
    except RousseauError as exc:
        report(False, "embeddings", str(exc))


def _doctor_costs(config: Config, report: Report) -> None:
    """Each agent's models have a price (else their calls count as zero), and an agent with a
    budget has owners to tell when it is reached."""
    from rousseau.assembly.models import JOBS, model_ref
    from rousseau.costs import Price, Prices

    prices = Prices({m: Price.of(p.input, p.output, p.cache_read, p.cache_write)
                     for m, p in config.prices.items()})  # fmt: skip
    names = [DEFAULT_AGENT, *(n for n in config.agents if n != DEFAULT_AGENT)]
    for name in names:
        own = config.for_agent(name)
        section, provider = own.agent, own.provider
        key = "agent" if name == DEFAULT_AGENT else f"agents.{name}"
        if provider is not None:
            refs = {"its model": getattr(own, provider).model}
            refs |= {f"models.{j}": r for j in JOBS if (r := getattr(section.models, j))}
            for what, ref in refs.items():
                used, model = model_ref(ref, provider)
                if model and not prices.knows(model, used):
                    report.warn(
                        "costs",
                        f"{key}: {what} {model} has no price: its calls count as zero"
                        f" (give it under prices:)",
                    )
        budget = section.budget
        limited = (budget.daily_usd, budget.monthly_usd, budget.daily_tokens)
        owners = section.approver.owners if section.approver is not None else []
        default = config.agent.approver.owners if config.agent.approver is not None else []
        if any(v is not None for v in limited) and not (owners or default):
            report.warn(
                "costs",
                f"{key}.budget: nobody is told when it is reached (set {key}.approver.owners)",
            )


def _doctor_speech(config: Config, report: Report) -> None:
    """With `speech`: what its engine needs is installed, and a piper voice is on disk."""
    import importlib.util

    section = config.speech
    if section is None:
        return
    extra = "voice-local" if section.engine == "piper" else "voice"
    needed = ["piper", "av"] if section.engine == "piper" else ["openai", "av"]
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        report(False, "speech", f"{', '.join(missing)} missing: pip install 'rousseau[{extra}]'")
        return
    if section.engine == "piper":
        voice = Path(section.voice).expanduser()
        absent = [p for p in (voice, Path(f"{voice}.json")) if not p.is_file()]
        if absent:
            report(False, "speech", f"speech.voice: no {absent[0]} (a Piper voice's file)")
            return
        report(True, "speech", f"piper, voice {voice.name}")
        return
    report(True, "speech", f"{section.base_url}, {section.model} ({section.voice})")


def _doctor_provider(config: Config, report: Report) -> None:
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
            await close_provider(provider)

    try:
        anyio.run(check)
        report(True, "provider", f"{name} ({why}) answers")
    except TimeoutError:
        report(False, "provider", f"{name}: no answer within 20 s")
    except RousseauError as exc:
        report(False, "provider", str(exc))
