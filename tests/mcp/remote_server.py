"""A streamable-HTTP MCP server for the tests (built with the SDK's high-level server)."""

from mcp.server.mcpserver import Context, MCPServer

remote = MCPServer("remote", version="1.0", log_level="WARNING")


@remote.tool()
def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
    """Who the server thinks is calling: the Authorization header it received."""
    return str((ctx.headers or {}).get("authorization", "nobody"))
