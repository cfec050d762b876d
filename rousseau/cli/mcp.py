"""`rousseau mcp`: the tools and stored conversations served over MCP on stdio."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rousseau.cli.common import load, with_state

if TYPE_CHECKING:
    from rousseau.state.backend import Backend


def mcp(args: argparse.Namespace) -> int:
    """An MCP server on stdin/stdout (logs go to stderr, so the protocol stays clean), on
    the configured state (SQLite's file or PostgreSQL)."""
    from rousseau.agent import MissingExtraError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtraError("rousseau mcp", "mcp") from None
    from rousseau.assembly import build_approver, build_registry, close_tools
    from rousseau.mcp.server import MCPServer

    config = load(args)
    registry, approver = build_registry(config), build_approver(config)

    async def serve(backend: Backend) -> None:
        try:
            await MCPServer(registry, approver, backend.store, backend.jobs).serve_stdio()
        finally:
            await close_tools([registry])  # the browser's Chromium, if it was started

    with_state(config, serve)
    return 0
