"""`rousseau memory`: what each agent keeps about each person (their profiles), shown or
exported as JSON. Entries are numbered as the person's /memory numbers them, so /forget N
names the same one; the dashboard deletes any of them."""

from __future__ import annotations

import argparse
import json
import sys
from itertools import groupby
from typing import TYPE_CHECKING

from rousseau.cli.common import fail, load, on_state

if TYPE_CHECKING:
    from rousseau.state.backend import Backend
    from rousseau.state.records import ProfileEntry

BAR = 30


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


def reindex(args: argparse.Namespace) -> int:
    """Embed what the background indexer has not yet, batch by batch, a progress line on
    stderr; each batch is kept as it is done, so a stop (or a failure) loses none."""
    config = load(args)
    section = config.embeddings
    if section is None:
        fail("embeddings is not configured: set embeddings.base_url and embeddings.model")
        return 2

    async def run(backend: Backend) -> int:
        import time

        from rousseau.providers.embeddings import Embeddings
        from rousseau.state.hybrid import Indexer

        vectors = backend.vectors
        assert vectors is not None  # open_backend makes them where embeddings is set
        if (why := await vectors.unavailable()) is not None:
            fail(why)
            return 1
        embeddings = Embeddings(section)
        indexer = Indexer(vectors=vectors, embeddings=embeddings, batch_size=section.batch_size)
        done, total = await vectors.progress(embeddings.model)
        start, started = done, time.monotonic()
        try:
            while step := await indexer.step():
                done = min(total, done + step)
                _progress(done, total, (done - start) / (time.monotonic() - started))
        finally:
            await embeddings.aclose()
        done, total = await vectors.progress(embeddings.model)
        sys.stderr.write("\n" if done > start else "")
        print(f"{done:,} of {total:,} messages embedded with {embeddings.model}")
        return 0

    return on_state(args, run, config)


def _progress(done: int, total: int, rate: float) -> None:
    share = done / total if total else 1.0
    filled = round(BAR * share)
    bar = "#" * filled + "-" * (BAR - filled)
    sys.stderr.write(f"\r[{bar}] {done:,}/{total:,} {share:4.0%}  {rate:,.0f} messages/s")
    sys.stderr.flush()
