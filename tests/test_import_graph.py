"""The import graph of rousseau between its parts (a subpackage such as `rousseau.state`, or a
top-level module such as `rousseau.policy`): no cycle, and no part reaching into another's
private names.

An arrow is a module-level import, `TYPE_CHECKING` blocks included; an import inside a function
is lazy loading and draws none. Private names count wherever they are imported.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict, deque
from collections.abc import Iterator

from tests.modules import (
    Import,
    Module,
    absolute,
    is_private,
    modules,
    part_of,
    read_imports,
    targets,
)

Arrows = dict[str, dict[str, str]]
"""part -> part it imports -> where the first such import is (`path:line`)."""


def arrows() -> Arrows:
    graph: Arrows = defaultdict(dict)
    for module in modules().values():
        for imp in module.imports:
            if imp.lazy:
                continue
            for target in sorted(targets(imp)):
                part = part_of(target)
                if target.split(".")[0] == "rousseau" and part != module.part:
                    graph[module.part].setdefault(part, module.where(imp.line))
    return graph


def strongly_connected(graph: Arrows) -> list[list[str]]:
    """The parts that reach each other (Tarjan's algorithm), each group of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(part: str) -> None:
        index[part] = low[part] = len(index)
        stack.append(part)
        for nxt in sorted(graph.get(part, {})):
            if nxt not in index:
                visit(nxt)
                low[part] = min(low[part], low[nxt])
            elif nxt in stack:
                low[part] = min(low[part], index[nxt])
        if low[part] == index[part]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == part:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for part in sorted(graph):
        if part not in index:
            visit(part)
    return groups


def a_cycle(graph: Arrows, group: list[str]) -> list[str]:
    """The shortest cycle through the group's first part (breadth-first), as arrows."""
    start = group[0]
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        part = queue.popleft()
        for nxt in sorted(graph.get(part, {})):
            if nxt == start:
                path = [part]
                while (previous := came_from[path[-1]]) is not None:
                    path.append(previous)
                steps = [*reversed(path), start]
                return [f"{a} -> {b} ({graph[a][b]})" for a, b in itertools.pairwise(steps)]
            if nxt in group and nxt not in came_from:
                came_from[nxt] = part
                queue.append(nxt)
    raise AssertionError(f"{group} holds no cycle")


def test_the_parts_import_each_other_without_cycles() -> None:
    graph = arrows()
    cycles = ["\n  ".join(a_cycle(graph, group)) for group in strongly_connected(graph)]
    assert not cycles, "import cycles between parts:\n  " + "\n\n  ".join(cycles)


READ = """
from __future__ import annotations
import anyio
from typing import TYPE_CHECKING
from rousseau.agent import Agent
from . import sibling
from ..state import Store
if TYPE_CHECKING:
    from rousseau.config import Config
else:
    import os

def later() -> None:
    from rousseau.transports.telegram import TelegramTransport
"""


def test_imports_are_read_as_meant() -> None:
    """The reading itself: relative imports resolved, `TYPE_CHECKING` an arrow, a function's
    import lazy."""
    tree = ast.parse(READ)
    read = {
        (i.module, i.name): (i.lazy, i.type_only)
        for i in read_imports(tree, "rousseau.router.core", is_package=False)
    }
    assert read[("rousseau.agent", "Agent")] == (False, False)
    assert read[("rousseau.router", "sibling")] == (False, False)
    assert read[("rousseau.state", "Store")] == (False, False)
    assert read[("rousseau.config", "Config")] == (False, True)
    assert read[("os", None)] == (False, False)
    assert read[("rousseau.transports.telegram", "TelegramTransport")] == (True, False)
    package = read_imports(tree, "rousseau.router", is_package=True)
    assert {i.module for i in package if i.name == "sibling"} == {"rousseau.router"}
    assert {i.module for i in package if i.name == "Store"} == {"rousseau.state"}


def _theirs(module: Module, target: str) -> bool:
    """`target` is a module of rousseau in another part than `module`'s."""
    return target.split(".")[0] == "rousseau" and part_of(target) != module.part


def _private_import(module: Module, imp: Import) -> bool:
    if not _theirs(module, imp.module):
        return False
    path = imp.module.split(".")
    return any(is_private(p) for p in path) or (imp.name is not None and is_private(imp.name))


def _module_names(module: Module) -> dict[str, str]:
    """Local names bound to a module: `import rousseau.cron.jobs` binds `rousseau`;
    `import rousseau.cron.jobs as jobs` and `from rousseau.cron import jobs` bind `jobs`."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    bound: dict[str, str] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, package)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules():
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    return bound


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)) is not None:
        return [*head, node.attr]
    return None


def private_names_taken(module: Module) -> Iterator[str]:
    for imp in module.imports:
        if _private_import(module, imp):
            name = f"{imp.module}.{imp.name}" if imp.name else imp.module
            yield f"{module.where(imp.line)}: imports {name}"
    bound = _module_names(module)
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        chain = _dotted(node.value)
        if chain is None or chain[0] not in bound:
            continue
        owner = ".".join([bound[chain[0]], *chain[1:]])
        if owner in modules() and _theirs(module, owner):
            yield f"{module.where(node.lineno)}: uses {owner}.{node.attr}"


def test_no_part_takes_another_parts_private_names() -> None:
    taken = [line for m in modules().values() for line in private_names_taken(m)]
    assert taken == []


REACHING_IN = """
import rousseau.agent.loop
import rousseau.tools.base as base
from rousseau.agent import loop
from rousseau.agent.loop import _run
from rousseau.state.store import _connect

loop._run(None)
rousseau.agent.loop._LIMIT
base._check
_connect()
"""


def test_private_names_are_found_however_reached() -> None:
    """The check itself, on a module of state that reaches into the agent core and the tools:
    by import, through a module imported by name or alias; its own part's are its own."""
    module = Module(
        name="rousseau.state.reaching",
        path=modules()["rousseau.state"].path.with_name("reaching.py"),
        tree=ast.parse(REACHING_IN),
    )
    module.imports.extend(read_imports(module.tree, module.name, is_package=False))
    assert sorted(private_names_taken(module)) == [
        "rousseau/state/reaching.py:10: uses rousseau.tools.base._check",
        "rousseau/state/reaching.py:5: imports rousseau.agent.loop._run",
        "rousseau/state/reaching.py:8: uses rousseau.agent.loop._run",
        "rousseau/state/reaching.py:9: uses rousseau.agent.loop._LIMIT",
    ]
