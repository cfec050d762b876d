"""Chaos: real `rousseau run` processes, on SQLite (one daemon) and on PostgreSQL (three
daemons sharing a throwaway PostgreSQL 15 server), each hurt in turn while messages flow
through the project's fake platforms and fake model:

- kill -9 under load, several times, the daemon started again at once (on PostgreSQL, the
  one polling Telegram);
- a full disk: the SQLite store, or PostgreSQL's data folder, on a small tmpfs filled up,
  then freed (needs root, to mount it);
- poison: malformed events on every transport whose platform a fake speaks over the wire
  (Telegram, Slack, Discord, Signal, iMessage, SMS), then a message from every chat;
- a hanging model: it answers nothing for a while (the daemon's client gives up after
  `openai.timeout`, set to 10 s here, and tries again);
- a clock set back an hour (needs libfaketime, Debian's faketime package).

For each: the messages sent, lost (never answered), doubled (answered twice, but for the
send boundary: a reply the platform took just before a kill, before the daemon recorded it
sent, goes out again after the restart; at most one per kill is allowed), misordered
(chats answered out of order), and the time from the fault's end to the first answer and
until all that waited were answered. Load is 10 chats each on Telegram and Slack, 5
messages a second on each, replies not streamed. The targets: nothing lost, nothing doubled.

Each daemon runs this source tree's code (PYTHONPATH), whatever rousseau is installed.
Prints a table; `--json PATH` also writes the figures, `--keep DIR` keeps the daemons'
folders and logs. Exits 1 when a target is missed.

    python bench/chaos.py [--backend sqlite|postgres|both] [--only FAULT,...] [--quick]
                          [--json PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chaos_daemons import PostgresBackend, SQLiteBackend, postgres_server  # noqa: E402
from bench.chaos_faults import FAULTS, Plan, Row  # noqa: E402
from bench.chaos_stage import NotStarted  # noqa: E402

QUICK = Plan(kills=2, chats=5, lead=2.0, between_kills=4.0, disk_s=5.0, hang_s=12.0)


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def header() -> str:
    return (
        f"{'backend':<9} {'fault':<32} {'sent':>5} {'lost':>5} {'doubled':>8} {'resent':>7}"
        f" {'misordered':>10} {'first answer':>13} {'all answered':>13}"
    )


def line(row: Row) -> str:
    start = f"{row.backend:<9} {row.fault:<32}"
    c = row.count
    if c is None:
        return f"{start} {'FAILED: ' + row.failed if row.failed else 'skipped: ' + row.skipped}"
    return (
        f"{start} {c.sent:>5} {c.lost:>5} {c.doubled:>8} {c.resent:>7} {c.misordered:>10}"
        f" {seconds(c.first_s):>13} {seconds(c.all_s):>13}{'' if row.met() else '  MISSED'}"
    )


def run_backend(
    name: str, faults: list[str], plan: Plan, show: Callable[[Row], None], keep: Path | None
) -> None:
    with contextlib.ExitStack() as stack:
        if keep is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rousseau-chaos-")))
        else:
            root = keep / name
        if name == "sqlite":
            for n, fault in enumerate(faults):
                for row in _rows(fault, SQLiteBackend(), root / f"{n}-{fault}", plan):
                    show(row)
            return
        with postgres_server() as (server, _):
            for n, fault in enumerate(faults):
                backend = PostgresBackend(server)
                backend.new_database()
                for row in _rows(fault, backend, root / f"{n}-{fault}", plan):
                    show(row)


def _rows(
    fault: str, backend: SQLiteBackend | PostgresBackend, root: Path, plan: Plan
) -> list[Row]:
    root.mkdir(parents=True)
    try:
        made = FAULTS[fault](backend, root, plan)
    except NotStarted as exc:  # the row says so; the others still run
        return [Row(backend=backend.name, fault=fault, failed=str(exc))]
    return made if isinstance(made, list) else [made]


def write_json(path: Path, rows: list[Row], plan: Plan, took: dict[str, float]) -> None:
    def number(value: float | None) -> float | None:
        return None if value is None or math.isinf(value) else round(value, 2)

    figures = []
    for row in rows:
        c = row.count
        figures.append(
            {
                "backend": row.backend,
                "fault": row.fault,
                "skipped": row.skipped or None,
                "failed": row.failed or None,
                "sent": c and c.sent,
                "lost": c and c.lost,
                "doubled": c and c.doubled,
                "resent_at_a_kill": c and c.resent,
                "misordered_chats": c and c.misordered,
                "other_replies": c and c.other,
                "first_answer_s": number(c.first_s) if c else None,
                "all_answered_s": number(c.all_s) if c else None,
                "target_met": row.met(),
                "notes": row.notes,
            }
        )
    path.write_text(
        json.dumps(
            {
                "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_average": round(os.getloadavg()[0], 2),
                "plan": {"kills": plan.kills, "chats": plan.chats, "rate": plan.rate},
                "seconds_per_backend": {k: round(v) for k, v in took.items()},
                "rows": figures,
            },
            indent=2,
        )
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--only", help="a comma-separated subset of: " + ", ".join(FAULTS))
    parser.add_argument("--quick", action="store_true", help="fewer kills, shorter faults")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep each daemon's folder and log under DIR"
    )
    args = parser.parse_args()
    faults = args.only.split(",") if args.only else list(FAULTS)
    if unknown := set(faults) - set(FAULTS):
        parser.error(f"no such fault: {', '.join(sorted(unknown))}")
    plan = QUICK if args.quick else Plan()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    # A terminated benchmark still stops the daemons and servers it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(
        f"rousseau chaos: Python {platform.python_version()}, {os.cpu_count()} CPUs,"
        f" {datetime.date.today()}; {plan.rate:g} messages/s on each of Telegram and Slack"
    )
    print(header(), flush=True)
    rows: list[Row] = []
    took: dict[str, float] = {}

    def show(row: Row) -> None:
        rows.append(row)
        print(line(row), flush=True)

    for backend in backends:
        started = time.monotonic()
        run_backend(backend, faults, plan, show, args.keep)
        took[backend] = time.monotonic() - started
    noted = [r for r in rows if r.notes]
    if noted:
        print("\nnotes:")
        for row in noted:
            for note in row.notes:
                print(f"  {row.backend} / {row.fault}: {note}")
    load = os.getloadavg()[0]
    took_s = ", ".join(f"{name}: {t:.0f} s" for name, t in took.items())
    print(f"\n{took_s}; load average {load:.2f} at the end")
    if args.json is not None:
        write_json(args.json, rows, plan, took)
    sys.exit(0 if all(r.met() for r in rows) else 1)


if __name__ == "__main__":
    main()
