"""The shape of the modules: small enough to read, and a transport's abilities seen by the type
checker rather than probed by name."""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase

import pytest

from tests.modules import Module, is_vendor_module, modules

LIMIT = 600
"""Lines of any module."""
LARGER = 800
"""Lines of the modules that are long by nature: one vendor's adapter, one storage backend,
declarative config sections."""
LARGER_ONES = (
    "rousseau/state/store.py",
    "rousseau/state/daemon_state.py",
    "rousseau/state/sqlite*.py",
    "rousseau/state/postgres*.py",
    "rousseau/config/*sections*.py",
)
"""The storage backends and the config sections; every vendor's adapter joins them."""
SHORT = 400
"""Lines (at most, exclusive) of the supervisor and of each of the router's stages."""
KEPT_SHORT = ("rousseau/daemon.py", "rousseau/router.py", "rousseau/router/*.py")


def _matches(module: Module, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(module.rel, p) for p in patterns)


def _limit(module: Module) -> int:
    if is_vendor_module(module.name) or _matches(module, LARGER_ONES):
        return LARGER
    return LIMIT


def _lines(module: Module) -> int:
    return len(module.path.read_text().splitlines())


def test_no_module_outgrows_its_limit() -> None:
    """Past 600 lines a module holds more than one job; a vendor, a backend or the config
    sections may take 800. Split by job, not by line count."""
    over = {
        m.rel: f"{_lines(m)} > {_limit(m)}" for m in modules().values() if _lines(m) > _limit(m)
    }
    assert over == {}


def test_the_supervisor_and_the_router_stages_stay_short() -> None:
    long = {
        m.rel: f"{_lines(m)} >= {SHORT}"
        for m in modules().values()
        if _matches(m, KEPT_SHORT) and _lines(m) >= SHORT
    }
    assert long == {}


WIRING = (
    "rousseau/router.py",
    "rousseau/router/*.py",
    "rousseau/daemon.py",
    "rousseau/streaming.py",
    "rousseau/delivery.py",
    "rousseau/web/*.py",
    "rousseau/app.py",
    "rousseau/assembly.py",
    "rousseau/assembly/*.py",
)
"""The code that drives transports and adapters: it knows their abilities by type."""
CONFIG_OBJECTS = {"config", "section"}
"""What the wiring may still look up by name: the config, and its sections (one per transport,
named by the transport)."""


def _probes(module: Module) -> list[str]:
    """`getattr(x, ...)` and `hasattr(x, ...)` on anything but the config and its sections."""
    found = []
    for node in sorted(ast.walk(module.tree), key=lambda n: getattr(n, "lineno", 0)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
        ):
            continue
        subject = node.args[0]
        while isinstance(subject, ast.Call) and ast.unparse(subject.func) == "getattr":
            subject = subject.args[0]  # getattr(getattr(config, name), "key"): a section's key
        if ast.unparse(subject) not in CONFIG_OBJECTS:
            found.append(f"{module.where(node.lineno)}: {ast.unparse(node)}")
    return found


def test_wiring_never_probes_an_adapter_by_name() -> None:
    """A transport's optional abilities are runtime-checkable protocols, a provider's and a
    transcriber's closing is in their protocol: nothing asks an adapter `getattr(t, "draft")`."""
    probes = [p for m in modules().values() if _matches(m, WIRING) for p in _probes(m)]
    assert probes == []


def test_the_probe_check_sees_through_a_section() -> None:
    tree = ast.parse(
        "getattr(getattr(config, name, None), 'ack_reaction', '')\n"
        "hasattr(section, 'streaming')\n"
        "getattr(transport, 'draft', None)\n"
        "getattr(self._media.transcriber, 'aclose', None)\n"
    )
    module = Module(name="rousseau.daemon", path=modules()["rousseau.daemon"].path, tree=tree)
    assert [p.split(": ", 1)[1] for p in _probes(module)] == [
        "getattr(transport, 'draft', None)",
        "getattr(self._media.transcriber, 'aclose', None)",
    ]


@pytest.mark.parametrize(
    "name", [n for n in modules() if n.startswith("rousseau.transports.abilities")]
)
def test_every_ability_is_a_runtime_checkable_protocol(name: str) -> None:
    """`isinstance(t, Drafts)` only works on a runtime-checkable protocol; one without the
    decorator raises TypeError at the first check, in production."""
    module = modules()[name]
    protocols = [
        node
        for node in module.tree.body
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(b).split("[")[0].endswith("Protocol") for b in node.bases)
    ]
    assert protocols
    bare = [
        p.name
        for p in protocols
        if not any(ast.unparse(d).endswith("runtime_checkable") for d in p.decorator_list)
    ]
    assert bare == []
