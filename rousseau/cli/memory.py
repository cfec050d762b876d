"""`rousseau memory`: what each agent keeps about each person (their profiles), shown or
exported as JSON. Entries are numbered as the person's /memory numbers them, so /forget N
names the same one; the dashboard deletes any of them."""

from __future__ import annotations

import argparse
import json
import sys
from itertools import groupby
from typing import TYPE_CHECKING

from rousseau.cli.common import on_state

if TYPE_CHECKING:
    from rousseau.state.records import ProfileEntry


def _entries(args: argparse.Namespace) -> list[ProfileEntry]:
    return on_state(
        args, lambda backend: backend.profiles.entries(agent=args.agent, person=args.person)
    )


def _profiles(entries: list[ProfileEntry]) -> list[tuple[str, str, list[ProfileEntry]]]:
    """The entries by profile: (agent, person, its entries oldest first)."""
    return [
        (agent, person, list(found))
        for (agent, person), found in groupby(entries, key=lambda e: (e.agent, e.person))
    ]


def show(args: argparse.Namespace) -> int:
    from rousseau.tools.memory import dated, used

    profiles = _profiles(_entries(args))
    if not profiles:
        print("no profiles" + (f" of {args.person}" if args.person else "") + " kept")
        return 0
    for n, (agent, person, entries) in enumerate(profiles):
        if n:
            print()
        count = len(entries)
        print(
            f"{person} (agent {agent}): {count} entr{'y' if count == 1 else 'ies'},"
            f" {used(entries):,} characters"
        )
        for i, entry in enumerate(entries, 1):
            print(f"  {i}. {dated(entry)}")
    return 0


def export(args: argparse.Namespace) -> int:
    profiles = [
        {
            "agent": agent,
            "person": person,
            "entries": [
                {"text": e.text, "created_at": e.created_at, "updated_at": e.updated_at}
                for e in entries
            ],
        }
        for agent, person, entries in _profiles(_entries(args))
    ]
    json.dump({"profiles": profiles}, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
    return 0
