"""`rousseau audit`: every tool call, who decided it and what came of it."""

from __future__ import annotations

import argparse

from rousseau.cli.common import on_state, when


def audit(args: argparse.Namespace) -> int:
    calls = on_state(args, lambda backend: backend.store.tool_calls(args.limit, args.session))
    if not calls:
        print("no tool calls recorded")
    for c in reversed(calls):
        why = f" ({c.reason})" if c.reason and c.decision != "allow" else ""
        print(
            f"{when(c.started_at)}  {c.session_id:<12} {c.tool:<14} {c.decision:<7}"
            f" {c.outcome:<6} {c.duration * 1000:7.0f} ms  by {c.decided_by or '-'}"
            f"  input {c.input_digest}{why}"
        )
    return 0
