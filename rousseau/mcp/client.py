"""External MCP servers' tools in the agent's registry, named `SERVER__TOOL`.

Each server in `mcp_servers` is kept connected by its own task: a server that will not start
or dies is logged and retried with backoff, and the others carry on. While a server is away
its tools stay listed and answer with an error result saying so, so a turn never breaks on it.
Calls go through the approver like any tool's (the loop asks before `execute`).
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import ToolCall, ToolOutput
from rousseau.config import MCPServerConfig
from rousseau.tools import Registry, Shared, function_tool

log = structlog.get_logger("rousseau.mcp")

SEPARATOR = "__"
PING_EVERY = 15.0
BACKOFF_CAP = 60.0
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class MCPConnection:
    """One external server: connect, register its tools, watch it, reconnect."""

    def __init__(
        self,
        name: str,
        config: MCPServerConfig,
        registry: Registry | Shared,
        *,
        call_timeout: float = 120,
    ) -> None:
        self.name = name
        self.config = config
        self.registry = registry
        self.call_timeout = call_timeout
        self.tools: list[str] = []
        self._session: Any = None
        self._lost = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._session is not None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the server connected until cancelled; `started` after the first attempt."""
        failures = 0
        started = False
        while True:
            errors = tempfile.TemporaryFile("w+")  # the server's stderr, shown if it fails
            try:
                async with self._open(errors) as session:
                    await self._register(session)
                    failures = 0
                    if not started:
                        started = True
                        task_status.started()
                    await self._watch(session)
                log.warning("mcp.server_lost", server=self.name)
            except Exception as exc:
                log.warning(
                    "mcp.server_failed",
                    server=self.name,
                    error=_describe(exc),
                    stderr=_tail(errors),
                )
            finally:
                self._session = None
                errors.close()
            if not started:
                started = True
                task_status.started()
            failures += 1
            await anyio.sleep(min(BACKOFF_CAP, 2.0 ** (failures - 1)))

    @asynccontextmanager
    async def _open(self, errors: Any) -> AsyncIterator[Any]:
        from mcp import ClientSession

        async with AsyncExitStack() as stack:
            if self.config.url is not None:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self.config.headers, timeout=httpx2.Timeout(30, read=300)
                    )
                )
                read, write, *_ = await stack.enter_async_context(
                    streamable_http_client(self.config.url, http_client=http)
                )
            else:
                from mcp import StdioServerParameters, stdio_client

                assert self.config.command is not None
                params = StdioServerParameters(
                    command=self.config.command, args=self.config.args, env=self.config.env or None
                )
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errors))
            session = await stack.enter_async_context(
                ClientSession(read, write, read_timeout_seconds=self.call_timeout)
            )
            with anyio.fail_after(30):
                await session.initialize()
            yield session

    async def _register(self, session: Any) -> None:
        listed = (await session.list_tools()).tools
        for old in self.tools:
            self.registry.unregister(old)
        self.tools = []
        for tool in listed:
            name = f"{self.name}{SEPARATOR}{tool.name}"
            self.registry.register(
                function_tool(
                    name,
                    tool.description or f"{tool.name} from the MCP server {self.name}",
                    dict(tool.input_schema or _ANY_OBJECT),
                    self._caller(tool.name),
                )
            )
            self.tools.append(name)
        self._session = session
        self._lost = anyio.Event()
        log.info("mcp.server_connected", server=self.name, tools=len(self.tools))

    async def _watch(self, session: Any) -> None:
        """Return when the server is gone: a failed call said so, or a ping goes unanswered."""
        while True:
            with anyio.move_on_after(PING_EVERY):
                await self._lost.wait()
                return
            try:
                with anyio.fail_after(10):
                    await session.send_ping()
            except Exception:
                return

    def _caller(self, tool: str) -> Any:
        async def call(input: dict[str, Any], _call: ToolCall) -> ToolOutput:
            session = self._session
            if session is None:
                return ToolOutput(
                    content=f"the MCP server {self.name} is not connected (reconnecting)",
                    is_error=True,
                )
            try:
                result = await session.call_tool(tool, input)
            except Exception as exc:
                self._lost.set()
                return ToolOutput(
                    content=f"the MCP server {self.name} failed: {_describe(exc)}", is_error=True
                )
            return ToolOutput(content=_content(result.content), is_error=bool(result.is_error))

        return call


def _content(blocks: list[Any]) -> str:
    parts = []
    for block in blocks:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _tail(errors: Any) -> str:
    try:
        errors.seek(0)
        return "\n".join(errors.read().splitlines()[-5:])
    except (OSError, ValueError):
        return ""


@asynccontextmanager
async def mcp_tools(
    servers: Mapping[str, MCPServerConfig], registry: Registry | Shared
) -> AsyncIterator[list[MCPConnection]]:
    """Connect every configured server (each tried once before this yields) and keep them
    connected while the block runs."""
    connections = [MCPConnection(n, c, registry) for n, c in servers.items()]
    if not connections:
        yield connections
        return
    try:
        import mcp  # noqa: F401
    except ImportError:
        log.error("mcp.missing_extra", hint="pip install 'rousseau[mcp]' to use mcp_servers")
        yield []
        return
    async with anyio.create_task_group() as tg:
        for connection in connections:
            await tg.start(connection.run)
        yield connections
        tg.cancel_scope.cancel()
