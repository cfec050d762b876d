"""The dependency rules of the design (the layers, and where the next capabilities live), lazy
vendor imports, SQL only in the store, and curated public exports.

Every import counts: module-level, inside a function, and under `if TYPE_CHECKING:` (a type
is a dependency too). The rules have no exemptions; a module that needs one is in the wrong
place.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.modules import Import, Module, is_vendor_module, modules, part_of, targets

VENDOR_SDKS = (
    "anthropic",
    "openai",
    "telegram",
    "slack_bolt",
    "slack_sdk",
    "discord",
    "nio",
    "neonize",
    "mcp",
    "aioimaplib",
    "aiosmtplib",
    "httpx",
    "jsonschema",
)

ASSEMBLY = ("rousseau.app", "rousseau.assembly")
"""The composition root, a module or a package, under either name."""
CLI, DAEMON, ROUTER = "rousseau.cli", "rousseau.daemon", "rousseau.router"
AGENT, TOOLS, PROVIDERS = "rousseau.agent", "rousseau.tools", "rousseau.providers"
STATE, TRANSPORTS, CONFIG = "rousseau.state", "rousseau.transports", "rousseau.config"
CRON, AGENTS, WEB = "rousseau.cron", "rousseau.agents", "rousseau.web"

STORAGE_BACKENDS = re.compile(
    r"rousseau\.state\.(store|daemon_state|worker|sqlite\w*|postgres\w*)(\..+)?$"
)
"""The modules of one storage backend; everyone else speaks the store protocol."""


def under(name: str, *prefixes: str) -> bool:
    """`name` is one of `prefixes` or inside one (`rousseau.app` is not inside `rousseau.ap`)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def ours() -> Iterator[Module]:
    return iter(modules().values())


def reached(module: Module) -> Iterator[tuple[Import, str]]:
    """Every (import, module it reaches) of a module."""
    for imp in module.imports:
        for target in sorted(targets(imp)):
            yield imp, target


@dataclass(kw_only=True, slots=True, frozen=True)
class Rule:
    """Modules under `layer` (but not under `spared`) never import a module under `never`."""

    name: str
    """Short, for the test's id."""
    says: str
    """The rule as the design states it."""
    layer: tuple[str, ...]
    never: tuple[str, ...]
    spared: tuple[str, ...] = ()
    nor_adapters_or_backends: bool = False
    """Nor any vendor's adapter module, nor any storage backend's module."""

    def forbids(self, target: str) -> bool:
        if under(target, *self.never):
            return True
        return self.nor_adapters_or_backends and (
            is_vendor_module(target) or STORAGE_BACKENDS.match(target) is not None
        )


RULES = [
    Rule(
        name="core-layers",
        says="the agent, tools, providers and state never import the command line, the daemon, "
        "the assembly module, the router or any transport",
        layer=(AGENT, TOOLS, PROVIDERS, STATE),
        never=(CLI, DAEMON, *ASSEMBLY, ROUTER, TRANSPORTS),
    ),
    Rule(
        name="state",
        says="state never imports transports, cron, the router, the command line, the daemon, "
        "the assembly module or the web face (they use the store, not the reverse)",
        layer=(STATE,),
        never=(TRANSPORTS, CRON, ROUTER, CLI, DAEMON, *ASSEMBLY, WEB),
    ),
    Rule(
        name="transports",
        says="transports never import state, the router, the daemon, the command line or the "
        "assembly module",
        layer=(TRANSPORTS,),
        never=(STATE, ROUTER, DAEMON, CLI, *ASSEMBLY),
    ),
    Rule(
        name="config",
        says="config never imports what is built from it: transports, agents, state, the "
        "router, cron, the daemon, the command line or the assembly module",
        layer=(CONFIG,),
        never=(TRANSPORTS, AGENTS, STATE, ROUTER, CRON, DAEMON, CLI, *ASSEMBLY),
    ),
    Rule(
        name="web",
        says="the web face never imports a transport's adapter or a storage backend (the "
        "dashboard uses the store protocol and the router)",
        layer=(WEB,),
        never=(),
        nor_adapters_or_backends=True,
    ),
    Rule(
        name="dashboard",
        says="the dashboard never uses a transport directly",
        layer=(f"{WEB}.dashboard",),
        never=(TRANSPORTS,),
    ),
    Rule(
        name="only-main-imports-cli",
        says="nothing but `__main__` imports the command line",
        layer=("rousseau",),
        spared=(CLI, "rousseau.__main__"),
        never=(CLI,),
    ),
    Rule(
        name="only-cli-imports-daemon",
        says="nothing but the command line imports the daemon",
        layer=("rousseau",),
        spared=(CLI, DAEMON),
        never=(DAEMON,),
    ),
    Rule(
        name="only-cli-and-daemon-import-assembly",
        says="nothing but the daemon and the command line imports the assembly module",
        layer=("rousseau",),
        spared=(CLI, DAEMON, *ASSEMBLY),
        never=ASSEMBLY,
    ),
]


def broken(rule: Rule) -> list[str]:
    """Each import line that breaks the rule, once."""
    found: set[str] = set()
    for module in ours():
        if not under(module.name, *rule.layer) or under(module.name, *rule.spared):
            continue
        found.update(f"{module.where(i.line)}: {t}" for i, t in reached(module) if rule.forbids(t))
    return sorted(found)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_layer_rule(rule: Rule) -> None:
    assert broken(rule) == [], rule.says


def _stdlib(top: str) -> bool:
    return top in sys.stdlib_module_names or top == "__future__"


def test_agent_core_imports_only_stdlib_anyio_structlog() -> None:
    offenders = [
        f"{m.where(imp.line)}: {target}"
        for m in ours()
        if under(m.name, AGENT)
        for imp, target in reached(m)
        if not (_stdlib(imp.top) or imp.top in ("anyio", "structlog") or under(target, AGENT))
    ]
    assert offenders == []


def test_messages_import_only_the_agent_core_and_the_stdlib() -> None:
    """Everyone may import the records, so they import nothing that could import them back."""
    module = modules()["rousseau.messages"]
    offenders = [
        f"{module.where(imp.line)}: {target}"
        for imp, target in reached(module)
        if not (_stdlib(imp.top) or under(target, AGENT))
    ]
    assert offenders == []


def test_concrete_adapters_are_picked_lazily_by_the_composition_points() -> None:
    """A vendor's module is loaded by its own package's registry (inside a function), or by the
    command line, the daemon and the assembly module, always inside a function: so `import
    rousseau` never needs an SDK. Another vendor's module of the same package may build on it."""
    offenders = []
    for module in ours():
        for imp, target in reached(module):
            if not is_vendor_module(target) or imp.lazy or imp.type_only:
                continue
            sibling = part_of(module.name) == part_of(target) and is_vendor_module(module.name)
            if not sibling:
                offenders.append(f"{module.where(imp.line)}: {target}")
    picked_elsewhere = [
        f"{module.where(imp.line)}: {target}"
        for module in ours()
        if not under(module.name, CLI, DAEMON, *ASSEMBLY)
        for imp, target in reached(module)
        if is_vendor_module(target) and part_of(target) != module.part
    ]
    assert offenders == []
    assert picked_elsewhere == []


def test_the_command_line_package_only_builds_the_parser() -> None:
    """`cli/__init__.py` names each handler as "module:function" and imports it when chosen:
    at import time it loads the stdlib and the command line's common helpers, nothing else."""
    module = modules()[CLI]
    offenders = [
        f"{module.where(imp.line)}: {target}"
        for imp, target in reached(module)
        if not imp.lazy and not (_stdlib(imp.top) or target in (CLI, f"{CLI}.common"))
    ]
    assert offenders == []


def test_the_core_agent_is_composed_never_subclassed() -> None:
    offenders = [
        f"{m.where(node.lineno)}: class {node.name}"
        for m in ours()
        if not under(m.name, AGENT)
        for node in ast.walk(m.tree)
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] == "Agent" for base in node.bases)
    ]
    assert offenders == []


SQL = re.compile(
    r"\b(SELECT\s[\s\S]*?\bFROM\b|SELECT\s+\d|INSERT(\s+OR\s+\w+)?\s+INTO\b|UPDATE\s+\w+\s+SET\b"
    r"|DELETE\s+FROM\b|(CREATE|DROP)\s+(UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX|TRIGGER|VIEW)\b"
    r"|ALTER\s+TABLE\b|PRAGMA\s+\w+|VACUUM\b)"
)
"""A statement as rousseau writes SQL: upper-case keywords."""
TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE(?:\s+IF\s+(?:NOT\s+)?EXISTS)?|ON)\s+\"?(\w+)")


def _strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every string literal but docstrings, an f-string with its holes as `?`."""
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            parts = (p.value if isinstance(p, ast.Constant) else "?" for p in node.values)
            yield node.lineno, "".join(str(p) for p in parts)


def _our_tables() -> set[str]:
    """The tables of rousseau's database, as state/ creates them."""
    created = re.compile(r"CREATE\s+(?:VIRTUAL\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)")
    return {
        table
        for m in ours()
        if under(m.name, STATE)
        for _, text in _strings(m.tree)
        for table in created.findall(text)
    }


def test_nothing_outside_state_issues_sql() -> None:
    """Outside state/, no string reads or writes rousseau's database: a statement naming one
    of its tables, or none at all (`PRAGMA`, `SELECT 1`), is the store's job. Statements on a
    vendor's own database (the WhatsApp library's session file) name only its tables."""
    tables = _our_tables()
    assert {"sessions", "messages", "inbox", "outbox", "cron_jobs"} <= tables
    offenders = []
    for module in ours():
        if under(module.name, STATE):
            continue
        for line, text in _strings(module.tree):
            if not SQL.search(text):
                continue
            named = set(TABLE.findall(text))
            if not named or named & tables:
                offenders.append(f"{module.where(line)}: {text[:60]!r}")
        offenders += [
            f"{module.where(node.lineno)}: .{node.func.attr}()"
            for node in ast.walk(module.tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("executemany", "executescript")
        ]
    assert offenders == []


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m.split(".")[0] for m in out.split()}


HELP = (
    "from rousseau.cli import main\nimport contextlib, io\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try: main(['--help'])\n    except SystemExit: pass"
)


@pytest.mark.parametrize(
    "code",
    [
        "import rousseau",
        "import rousseau.agent, rousseau.tools, rousseau.state\n"
        "import rousseau.providers, rousseau.config",
        "import rousseau.messages, rousseau.transports, rousseau.transports.base\n"
        "import rousseau.transports.abilities",
        HELP,
    ],
)
def test_no_vendor_sdk_is_loaded(code: str) -> None:
    loaded = _loaded_after(code)
    assert loaded.isdisjoint(VENDOR_SDKS), loaded & set(VENDOR_SDKS)


def test_help_loads_no_pydantic_either() -> None:
    loaded = _loaded_after(HELP)
    assert "pydantic" not in loaded and "yaml" not in loaded


def _packages() -> list[str]:
    """Every package of rousseau as it is today (a module that becomes a package joins), and
    the message layer, which everyone imports by name."""
    names = [m.name for m in ours() if m.path.name == "__init__.py"]
    return sorted({*names, "rousseau.messages"})


@pytest.mark.parametrize("module", _packages())
def test_exports_are_curated_and_importable(module: str) -> None:
    """What a package defines or re-exports from its own modules is listed in `__all__`, and
    everything listed is there. Names it imports from elsewhere for its own use are not."""
    mod = importlib.import_module(module)
    defined = _bound_at_top(modules()[module].tree)

    def own(name: str) -> bool:
        owner = getattr(getattr(mod, name), "__module__", None)
        return name in defined or (isinstance(owner, str) and under(owner, module))

    public = {
        n for n in vars(mod) if not n.startswith("_") and not isinstance(getattr(mod, n), type(sys))
    }
    public = {n for n in public if own(n)}
    exported = list(getattr(mod, "__all__", []))
    assert public <= set(exported), public - set(exported)
    assert sorted(exported) == sorted(set(exported)), "duplicate names in __all__"
    for name in exported:
        assert getattr(mod, name) is not None


def _bound_at_top(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        targets_ = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets_ = [node.target]
        names.update(t.id for t in targets_ if isinstance(t, ast.Name))
    return names


def test_agent_exports_the_contract() -> None:
    import rousseau.agent as agent

    contract = {
        "Agent",
        "Options",
        "Session",
        "Message",
        "Content",
        "ContentKind",
        "Role",
        "ToolUse",
        "ToolResult",
        "Request",
        "Response",
        "StopReason",
        "Usage",
        "Provider",
        "StreamingProvider",
        "StreamEvent",
        "Approver",
        "ApprovalRequest",
        "Decision",
        "AllowAllApprover",
        "DenyAllApprover",
        "PatternApprover",
        "PatternRule",
        "Compressor",
        "NoopCompressor",
        "LLMCompressor",
        "SkillsProvider",
        "RecallProvider",
        "EmptySessionError",
        "ToolNotFoundError",
        "MaxIterationsError",
    }
    assert contract <= set(agent.__all__)
    import rousseau.tools as tools

    assert {"Tool", "Registry"} <= set(tools.__all__)
