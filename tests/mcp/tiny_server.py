"""A tiny external MCP server for the tests, written with the official SDK (stdio).

Tools: shout {text} -> the text in capitals; die {} -> the process exits at once (to test
reconnection); count {} -> how many calls this process has served.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

calls = 0


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name="shout",
                description="Say it louder",
                input_schema={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                    "additionalProperties": False,
                },
            ),
            types.Tool(name="die", description="Exit", input_schema={"type": "object"}),
            types.Tool(name="count", description="Calls served", input_schema={"type": "object"}),
        ]
    )


async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    global calls
    calls += 1
    args = params.arguments or {}
    if params.name == "die":
        os._exit(3)
    if params.name == "count":
        text = f"{calls} calls, pid {os.getpid()}"
    elif params.name == "shout":
        text = str(args["text"]).upper() + "!"
    else:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="no such tool")], is_error=True
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server("tiny", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
