"""The package read as source, for the tests of its shape: every module, its imports resolved
to absolute names, and the part it belongs to (a subpackage, or a top-level module).

Read with `ast`, never imported, so a test of the shape fails on the line that breaks it and
not on whatever importing the module would do.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "rousseau"
ROOT = PACKAGE.name
ADAPTER_PACKAGES = ("rousseau.transports", "rousseau.providers")
SHARED = {
    "rousseau.transports",
    "rousseau.transports.base",
    "rousseau.transports.abilities",
    "rousseau.transports.split",
    "rousseau.transports.unreadable",
    "rousseau.providers",
    "rousseau.providers.errors",
    "rousseau.providers.fallback",
    "rousseau.providers.lazy",
}
"""The modules of transports/ and providers/ that are no one vendor's: the protocols, the
registries and their helpers. Every other module there is one vendor's adapter."""


def is_vendor_module(name: str) -> bool:
    """`name` is one vendor's adapter (`rousseau.transports.slack`, `rousseau.providers.openai`)."""
    return name.startswith(tuple(p + "." for p in ADAPTER_PACKAGES)) and name not in SHARED


@dataclass(kw_only=True, slots=True, frozen=True)
class Import:
    """One import statement's arrow to one module."""

    module: str
    """The module imported, absolute (`rousseau.state.store`, `anyio`)."""
    name: str | None
    """The name taken from it (`from module import name`); None for `import module`."""
    line: int
    """Where the statement is, for the failure message."""
    lazy: bool
    """Inside a function body: loaded when called, not when the module is imported."""
    type_only: bool
    """Inside `if TYPE_CHECKING:`: an arrow for the layering, never loaded at run time."""

    @property
    def top(self) -> str:
        """The top-level package (`rousseau`, `anyio`, `os`)."""
        return self.module.split(".")[0]


@dataclass(kw_only=True, slots=True)
class Module:
    """One source file of the package."""

    name: str
    """Its dotted name (`rousseau.state.store`; a package is named by its `__init__`)."""
    path: Path
    """The file."""
    tree: ast.Module
    """Its syntax tree."""
    imports: list[Import] = field(default_factory=list)
    """Every import in it, module-level and lazy, `TYPE_CHECKING` blocks included."""

    @property
    def part(self) -> str:
        return part_of(self.name)

    @property
    def rel(self) -> str:
        """Its path from the project root, as people name it (`rousseau/state/store.py`)."""
        return self.path.relative_to(PACKAGE.parent).as_posix()

    def where(self, line: int) -> str:
        return f"{self.rel}:{line}"


def part_of(module: str) -> str:
    """The part a module belongs to: its subpackage or top-level module (`rousseau.state`,
    `rousseau.policy`), or the root package itself."""
    return ".".join(module.split(".")[:2])


def is_private(name: str) -> bool:
    """`_name` is private; dunders (`__version__`) and the package's `__init__` are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def modules() -> dict[str, Module]:
    """Every module of the package by dotted name, its imports read."""
    found: dict[str, Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        module = Module(name=name, path=path, tree=ast.parse(path.read_text(), str(path)))
        module.imports.extend(read_imports(module.tree, name, is_package=is_package))
        found[name] = module
    return found


def targets(imp: Import) -> set[str]:
    """The modules an import reaches: `from rousseau import config` reaches `rousseau` and
    `rousseau.config`; `from rousseau.state import Store` reaches `rousseau.state` alone."""
    reached = {imp.module}
    if imp.name is not None and f"{imp.module}.{imp.name}" in modules():
        reached.add(f"{imp.module}.{imp.name}")
    return reached


def read_imports(tree: ast.Module, name: str, *, is_package: bool) -> list[Import]:
    """The imports of module `name`, relative ones made absolute."""
    package = name if is_package else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool, typing: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(
                Import(module=a.name, name=None, line=node.lineno, lazy=lazy, type_only=typing)
                for a in node.names
            )
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, package)
            found.extend(
                Import(module=module, name=a.name, line=node.lineno, lazy=lazy, type_only=typing)
                for a in node.names
            )
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                visit(statement, lazy, True)
            for statement in node.orelse:
                visit(statement, lazy, typing)
            return
        inside = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside, typing)

    visit(tree, False, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module of `from ... import`, relative levels resolved against `package`."""
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)
