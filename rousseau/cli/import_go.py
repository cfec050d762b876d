"""`rousseau import-go PATH`: sessions, messages and cron jobs from a rousseau-agent database."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli.common import load, open_store

if TYPE_CHECKING:
    from rousseau.state.import_go import GoImport

SHOWN_SKIPS = 20
"""Lines of "left out" printed before the rest are only counted."""


def import_go(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.state.import_go import import_go as run_import

    config = load(args)
    source = Path(args.path).expanduser()
    own = Path(config.state.path).expanduser()
    if source.exists() and own.exists() and source.samefile(own):
        # Opening it as rousseau's store would fail on rousseau-agent's tables; say what to do.
        raise StoreError(
            f"{source} is also state.path, where rousseau keeps its own store; move it aside "
            f"(e.g. mv {source} {source.with_name('rousseau-agent.db')}) and import the moved file"
        )
    with open_store(args, config) as store:
        result = run_import(source, store, timezone=config.cron.timezone)
    for line in report(result, str(source)):
        print(line)
    return 0


def report(result: GoImport, source: str) -> list[str]:
    """What was imported, what was already here and what was left out, in a few lines."""
    new = result.sessions or result.cron_jobs
    lines = [f"imported from {source}:" if new else f"nothing new to import from {source}"]
    if new:
        lines.append(
            f"  {_count(result.sessions, 'session')} ({_count(result.messages, 'message')},"
            f" {_count(result.tool_calls, 'tool call')})"
        )
        if result.chats:
            lines.append(
                f"  {_count(result.chats, 'WhatsApp chat')} will continue where it left off"
            )
        lines.append(f"  {_count(result.cron_jobs, 'cron job')} (see: rousseau cron list)")
    if result.sessions_present or result.cron_present:
        lines.append(
            f"already here: {_count(result.sessions_present, 'session')},"
            f" {_count(result.cron_present, 'cron job')}"
        )
    if result.empty_sessions:
        lines.append(f"left out {_count(result.empty_sessions, 'empty session')}")
    if result.skipped:
        lines.append("left out, or copied in part:")
        lines += [f"  {why}" for why in result.skipped[:SHOWN_SKIPS]]
        if len(result.skipped) > SHOWN_SKIPS:
            lines.append(f"  ... and {len(result.skipped) - SHOWN_SKIPS} more")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
