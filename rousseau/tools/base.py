"""The Tool base class, the thread-safe Registry, and workspace path confinement."""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rousseau.agent import ToolCall, ToolDefinition, ToolNotFoundError, ToolOutput

if TYPE_CHECKING:
    from jsonschema.protocols import Validator


class DuplicateToolError(ValueError):
    """A tool with this name is already registered."""


class Tool(ABC):
    """A built-in or plugged-in tool: a name, a JSON schema and an async `execute`.

    Subclasses set `name`, `description` and `input_schema` and implement `execute`. Inputs
    are checked against the schema before `execute` runs, so it may trust their shape.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]

    _validator: Validator | None = None

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def validate(self, input: dict[str, Any]) -> str | None:
        if self._validator is None:
            # Imported on first use: jsonschema costs start-up time the CLI need not pay.
            from jsonschema import Draft202012Validator

            Draft202012Validator.check_schema(self.input_schema)
            self._validator = Draft202012Validator(self.input_schema)
        errors = sorted(self._validator.iter_errors(input), key=lambda e: list(e.path))
        if not errors:
            return None
        return "; ".join(_describe(e.path, e.message) for e in errors[:3])

    @abstractmethod
    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput: ...


ToolFunction = Callable[[dict[str, Any], ToolCall], Awaitable[ToolOutput]]


class FunctionTool(Tool):
    """A tool made at run time from a name, a schema and a function (see `function_tool`)."""

    def __init__(self, run: ToolFunction) -> None:
        self._run = run

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        return await self._run(input, call)


def function_tool(
    name: str, description: str, input_schema: dict[str, Any], run: ToolFunction
) -> Tool:
    """A tool whose name and schema are known only at run time (MCP tools, store tools)."""
    attributes = {"name": name, "description": description, "input_schema": input_schema}
    kind = type(f"FunctionTool[{name}]", (FunctionTool,), attributes)
    tool: Tool = kind(run)
    return tool


def _describe(path: Iterable[Any], message: str) -> str:
    where = ".".join(str(p) for p in path)
    return f"{where}: {message}" if where else message


class Registry:
    """Tools by name. Safe to read and register from several threads."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; raise DuplicateToolError if its name is taken."""
        with self._lock:
            if tool.name in self._tools:
                raise DuplicateToolError(f"tool already registered: {tool.name}")
            self._tools[tool.name] = tool

    def must_register(self, tool: Tool) -> Tool:
        """Register and return the tool, for one-line setup; raises like `register`."""
        self.register(tool)
        return tool

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tools.pop(name, None)

    def get(self, name: str) -> Tool:
        with self._lock:
            tool = self._tools.get(name)
        if tool is None:
            raise ToolNotFoundError(name)
        return tool

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._tools)

    def definitions(self) -> list[ToolDefinition]:
        with self._lock:
            tools = sorted(self._tools.values(), key=lambda t: t.name)
        return [t.definition() for t in tools]

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._tools

    def __len__(self) -> int:
        with self._lock:
            return len(self._tools)


class OutsideWorkspaceError(ValueError):
    """A path resolves outside the workspace."""


class WorkspaceTool(Tool):
    """A tool confined to a workspace: a path that leads out becomes an error result."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        try:
            return await self.run(input, call)
        except OutsideWorkspaceError as exc:
            return ToolOutput(content=str(exc), is_error=True)

    @abstractmethod
    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        """Do the work; `self.workspace.resolve` may raise OutsideWorkspaceError."""


class Workspace:
    """The folder tools may touch. Every path is resolved, symlinks included, and checked."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.root = Path(os.path.realpath(path))

    def resolve(self, path: str) -> Path:
        """The real path of `path` (relative to the root, or absolute inside it)."""
        if "\x00" in path:
            raise OutsideWorkspaceError("path contains a NUL byte")
        candidate = Path(path).expanduser() if path.startswith("~") else Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        real = Path(os.path.realpath(candidate))
        if real != self.root and not real.is_relative_to(self.root):
            raise OutsideWorkspaceError(f"path {path!r} is outside the workspace")
        return real

    def relative(self, path: Path) -> str:
        """How to name a resolved path to the model: relative to the root."""
        rel = path.relative_to(self.root)
        return str(rel) if str(rel) != "." else "."


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first block is how git and grep tell binary files too."""
    return b"\x00" in head
