"""`rousseau mcp`: the registry's tools and read-only store tools over MCP (stdio).

Every call runs as in a turn (rousseau.agent.loop.run_tool): input checked against the
schema, the approver asked (nobody is at a keyboard here, so a call that would ask is
denied), failures returned as `isError` results with the reason, never as protocol errors.
The store tools only read, so they need no approval.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

import structlog

from rousseau import __version__
from rousseau.agent import AllowAllApprover, Approver, ToolCall, ToolOutput, ToolUse
from rousseau.agent.loop import run_tool
from rousseau.cron import describe
from rousseau.state import SessionStore
from rousseau.state.protocol import JobStore
from rousseau.tools import Registry, function_tool

if TYPE_CHECKING:
    import mcp_types

log = structlog.get_logger("rousseau.mcp")

SESSION_ID = "mcp"
_NOTHING: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _json(value: Any) -> ToolOutput:
    return ToolOutput(content=json.dumps(value, ensure_ascii=False))


def store_registry(store: SessionStore, jobs: JobStore) -> Registry:
    """rousseau_search_sessions, rousseau_list_sessions, rousseau_read_session and
    rousseau_cron_list."""

    async def search(args: dict[str, Any], call: ToolCall) -> ToolOutput:
        hits = await store.search(args["query"], args.get("limit", 20))
        return _json(
            [
                {
                    "session": h.session_id,
                    "title": h.title,
                    "role": h.role.value,
                    "text": h.text,
                    "at": h.created_at,
                }
                for h in hits
            ]
        )

    async def sessions(args: dict[str, Any], call: ToolCall) -> ToolOutput:
        found = await store.list_sessions(args.get("limit", 50))
        return _json(
            [
                {"id": s.id, "title": s.title, "messages": s.message_count, "updated": s.updated_at}
                for s in found
            ]
        )

    async def read(args: dict[str, Any], call: ToolCall) -> ToolOutput:
        session = await store.load(args["id"])
        if session is None:
            return ToolOutput(content=f"no session {args['id']!r}", is_error=True)
        return _json([{"role": m.role.value, "text": m.text} for m in session.messages])

    async def cron(args: dict[str, Any], call: ToolCall) -> ToolOutput:
        found = await jobs.all()
        return ToolOutput(content="\n".join(describe(j) for j in found) or "no cron jobs")

    limit = {"type": "integer", "minimum": 1, "maximum": 500}
    return Registry(
        [
            function_tool(
                "rousseau_search_sessions",
                "Search every stored conversation for words; the best matches, with session ids.",
                {
                    "type": "object",
                    "properties": {"query": {"type": "string", "minLength": 1}, "limit": limit},
                    "required": ["query"],
                    "additionalProperties": False,
                },
                search,
            ),
            function_tool(
                "rousseau_list_sessions",
                "The most recently active conversations: id, title, messages, last activity.",
                {"type": "object", "properties": {"limit": limit}, "additionalProperties": False},
                sessions,
            ),
            function_tool(
                "rousseau_read_session",
                "Every message of one conversation, oldest first.",
                {
                    "type": "object",
                    "properties": {"id": {"type": "string", "minLength": 1}},
                    "required": ["id"],
                    "additionalProperties": False,
                },
                read,
            ),
            function_tool(
                "rousseau_cron_list",
                "The scheduled prompts: name, schedule, next run, last status, target.",
                _NOTHING,
                cron,
            ),
        ]
    )


class MCPServer:
    def __init__(
        self, registry: Registry, approver: Approver, store: SessionStore, jobs: JobStore
    ) -> None:
        self.registry = registry
        self.approver = approver
        self.store_tools = store_registry(store, jobs)
        self._ids = itertools.count(1)

    def tools(self) -> list[mcp_types.Tool]:
        import mcp_types

        return [
            mcp_types.Tool(name=d.name, description=d.description, input_schema=d.input_schema)
            for d in [*self.registry.definitions(), *self.store_tools.definitions()]
        ]

    async def call(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool; returns (text, is_error)."""
        use = ToolUse(id=f"mcp_{next(self._ids)}", name=name, input=args)
        if name in self.store_tools:
            result, _ = await run_tool(self.store_tools, AllowAllApprover(), SESSION_ID, use)
        else:
            result, _ = await run_tool(
                self.registry, self.approver, SESSION_ID, use, unattended=True
            )
        log.info("mcp.call", tool=name, is_error=result.is_error)
        return result.content, result.is_error

    def server(self) -> Any:
        import mcp_types
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
            return mcp_types.ListToolsResult(tools=self.tools())

        async def call_tool(ctx: Any, params: Any) -> mcp_types.CallToolResult:
            text, is_error = await self.call(params.name, dict(params.arguments or {}))
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=text)], is_error=is_error
            )

        return Server(
            "rousseau",
            version=__version__,
            instructions="rousseau's tools (confined to its workspace, allowed by its "
            "approval policy) and its stored conversations.",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def serve_stdio(self) -> None:
        from mcp.server.stdio import stdio_server

        server = self.server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
