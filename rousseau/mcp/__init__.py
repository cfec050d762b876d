"""MCP: `rousseau mcp` serves the tools and the store over stdio (server.py); external MCP
servers' tools join the agent's registry (client.py)."""
