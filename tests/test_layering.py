"""The dependency rule, lazy vendor imports, and curated public exports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "rousseau"
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


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_agent_core_imports_only_stdlib_anyio_structlog() -> None:
    allowed = {"anyio", "structlog", "rousseau"}
    offenders = {}
    for path in (PACKAGE / "agent").glob("*.py"):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if top not in allowed or (top == "rousseau" and not name.startswith("rousseau.agent")):
                offenders.setdefault(path.name, []).append(name)
    assert offenders == {}


def test_core_layers_never_import_the_cli_or_transports() -> None:
    for layer in ("agent", "tools", "providers", "state"):
        for path in (PACKAGE / layer).glob("*.py"):
            for name in imported_modules(path):
                # transports.base holds the shared records (Inbound, Outbound), no adapter.
                adapter = name.startswith("rousseau.transports") and not name.endswith(".base")
                assert not adapter, (path, name)
                assert not name.startswith(
                    ("rousseau.cli", "rousseau.assembly", "rousseau.daemon", "rousseau.router")
                ), (path, name)


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m.split(".")[0] for m in out.split()}


@pytest.mark.parametrize(
    "code",
    [
        "import rousseau",
        "import rousseau.agent, rousseau.tools, rousseau.state\n"
        "import rousseau.providers, rousseau.config",
        "from rousseau.cli import main\nimport contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n    except SystemExit: pass",
    ],
)
def test_no_vendor_sdk_is_loaded(code: str) -> None:
    loaded = _loaded_after(code)
    assert loaded.isdisjoint(VENDOR_SDKS), loaded & set(VENDOR_SDKS)


def test_help_loads_no_pydantic_either() -> None:
    loaded = _loaded_after(
        "from rousseau.cli import main\nimport contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n    except SystemExit: pass"
    )
    assert "pydantic" not in loaded and "yaml" not in loaded


@pytest.mark.parametrize("module", ["rousseau.agent", "rousseau.tools", "rousseau.state"])
def test_exports_are_curated_and_importable(module: str) -> None:
    mod = __import__(module, fromlist=["__all__"])
    assert sorted(mod.__all__) == sorted(set(mod.__all__)), "duplicate names in __all__"
    for name in mod.__all__:
        assert getattr(mod, name) is not None
    public = {
        n for n in vars(mod) if not n.startswith("_") and not isinstance(getattr(mod, n), type(sys))
    }
    public -= {"annotations", "os", "Iterable"}
    assert public <= set(mod.__all__), public - set(mod.__all__)


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
