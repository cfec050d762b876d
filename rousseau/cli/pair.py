"""`rousseau pair`: admitting strangers who asked with a pairing code."""

from __future__ import annotations

import argparse

from rousseau.cli.common import on_state


def list_codes(args: argparse.Namespace) -> int:
    import datetime

    from rousseau.approvals import visible

    codes = on_state(args, lambda backend: backend.state.pairing_codes())
    if not codes:
        print("no pairing codes waiting")
        return 0
    rows = [["CODE", "TRANSPORT", "SENDER", "CHAT", "ASKED", "EXPIRES"]]
    for c in codes:
        # ids come from strangers: shown with nothing invisible in them
        rows.append([c.code, c.transport, visible(c.sender_id, 40, 20), visible(c.chat_id, 40, 20)])
        rows[-1] += [
            datetime.datetime.fromtimestamp(t).strftime("%H:%M")
            for t in (c.created_at, c.expires_at)
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def approve(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.approvals import visible

    approved = on_state(args, lambda backend: backend.state.approve(args.code))
    if approved is None:
        raise StoreError(f"no such pairing code (or it expired): {args.code}")
    print(f"admitted {approved.transport} sender {visible(approved.sender_id)}")
    return 0


def reject(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.approvals import visible
    from rousseau.state.records import REJECTED_FOR

    rejected = on_state(args, lambda backend: backend.state.reject(args.code))
    if rejected is None:
        raise StoreError(f"no such pairing code (or it expired): {args.code}")
    print(
        f"rejected {rejected.transport} sender {visible(rejected.sender_id)}"
        f" (no new code for them for {REJECTED_FOR / 3600:g} h)"
    )
    return 0
