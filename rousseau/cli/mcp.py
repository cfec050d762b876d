"""`rousseau mcp`: the tools and stored conversations served over MCP on stdio."""

from __future__ import annotations

import argparse

from rousseau.cli.common import load, open_store


def mcp(args: argparse.Namespace) -> int:
    """An MCP server on stdin/stdout (logs go to stderr, so the protocol stays clean)."""
    from rousseau.agent import MissingExtraError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtraError("rousseau mcp", "mcp") from None
    from rousseau.assembly import build_approver, build_registry
    from rousseau.mcp.server import serve

    config = load(args)
    with open_store(args) as store:
        serve(build_registry(config), build_approver(config), store)
    return 0
