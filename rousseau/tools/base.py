"""The Tool base class, the thread-safe Registry, and tools confined to the workspace."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, TypeVarTuple, Unpack, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import structlog

from rousseau.agent import ToolCall, ToolDefinition, ToolNotFoundError, ToolOutput
from rousseau.tools.fs import OutsideWorkspaceError, Workspace, WorkspaceError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "TOOL_DEADLINE",
    "DuplicateToolError",
    "FunctionTool",
    "OutsideWorkspaceError",
    "Registry",
    "Shared",
    "Subset",
    "Tool",
    "Workspace",
    "WorkspaceError",
    "WorkspaceTool",
    "function_tool",
    "looks_binary",
    "run_in_thread",
]

log = structlog.get_logger("rousseau.tools")
T = TypeVar("T")
Args = TypeVarTuple("Args")


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

    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

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


class Shared:
    """Several registries that take the same tools: MCP servers' tools, given to every
    agent (each agent's `tools` chooses which it is offered)."""

    def __init__(self, registries: Iterable[Registry]) -> None:
        self.registries = list(registries)

    def register(self, tool: Tool) -> None:
        for registry in self.registries:
            registry.register(tool)

    def unregister(self, name: str) -> None:
        for registry in self.registries:
            registry.unregister(name)


class Subset:
    """The tools of a registry whose names match one of `patterns` (globs: `github__*`), as
    one agent sees them; tools registered later (MCP servers') are filtered alike."""

    def __init__(self, registry: Registry, patterns: Iterable[str]) -> None:
        self.registry = registry
        self.patterns = tuple(patterns)

    def allows(self, name: str) -> bool:
        return any(fnmatchcase(name, p) for p in self.patterns)

    def get(self, name: str) -> Tool:
        if not self.allows(name):
            raise ToolNotFoundError(name)
        return self.registry.get(name)

    def definitions(self) -> list[ToolDefinition]:
        return [d for d in self.registry.definitions() if self.allows(d.name)]


TOOL_DEADLINE = 60.0
"""Seconds a file tool call may take before it is abandoned and reported as an error."""


class WorkspaceTool(Tool):
    """A tool confined to a workspace: a refused path or file becomes an error result, and a
    call that outlives `deadline` seconds is abandoned and reported."""

    def __init__(self, workspace: Workspace, *, deadline: float = TOOL_DEADLINE) -> None:
        self.workspace = workspace
        self.deadline = deadline

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        with anyio.move_on_after(self.deadline):
            try:
                return await self.run(input, call)
            except WorkspaceError as exc:
                return ToolOutput(content=str(exc), is_error=True)
        log.warning("tools.deadline_exceeded", tool=self.name, deadline=self.deadline)
        return ToolOutput(
            content=f"{self.name} gave up after {self.deadline:g} s and was abandoned "
            "(a slow or stuck file system?)",
            is_error=True,
        )

    @abstractmethod
    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        """Do the work, blocking parts through `run_in_thread`; open files with
        `self.workspace.open_file` (never by a path checked earlier), which may raise
        WorkspaceError."""


async def run_in_thread(fn: Callable[[Unpack[Args]], T], *args: *Args) -> T:
    """`fn(*args)` in a new daemon thread, awaited in a way a deadline can abandon.

    Not anyio.to_thread: its worker threads are not daemon threads, so one stuck in a read
    would keep the process from exiting. Nothing waits for an abandoned one of these.
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[T, None] | tuple[None, BaseException]] = []

    def work() -> None:
        try:
            outcome.append((fn(*args), None))
        except BaseException as exc:
            outcome.append((None, exc))
        with suppress(Exception):  # the event loop is gone: nobody is waiting any more
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(
        target=work, name=f"rousseau-tool-{getattr(fn, '__name__', 'call')}", daemon=True
    ).start()
    await done.wait()
    value, error = outcome[0]
    if error is not None:
        raise error
    return cast(T, value)


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first block is how git and grep tell binary files too."""
    return b"\x00" in head
