"""`rousseau mcp`: the tools and stored conversations served over MCP on stdio."""

from __future__ import annotations

import argparse

from rousseau.cli.common import load, with_state


def mcp(args: argparse.Namespace) -> int:
    """An MCP server on stdin/stdout (logs go to stderr, so the protocol stays clean), on
    the configured state (SQLite's file or PostgreSQL)."""
    from rousseau.agent import MissingExtraError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtraError("rousseau mcp", "mcp") from None
    from rousseau.assembly import build_approver, build_registry
    from rousseau.mcp.server import MCPServer

    config = load(args)
    registry, approver = build_registry(config), build_approver(config)
    with_state(
        config,
        lambda backend: MCPServer(registry, approver, backend.store, backend.jobs).serve_stdio(),
    )
    return 0
