"""A soak: 100,000 messages through the daemon (python-telegram-bot against the fake Bot API
in another process, the router, the store, the outbox) with retention set short, printing
every 10,000 messages the database's size on disk, the rows of its bookkeeping tables (the
inbox's dedupe memory and the outbox), the process's RSS, and the event loop's worst lag in
that stretch (after a line with the worst lag during startup, until Telegram is reached).

The bookkeeping rows, RSS and the file's size stay flat once the sweeps run: with
compression on (as a long-running daemon needs it) each chat's session is folded into a
summary past 60 messages, and `state.retention.compacted` is set short too, so the sweep
deletes the folded messages (with their full-text index entries) as it deletes the
bookkeeping; SQLite reuses the freed pages. With --keep-history the folded messages are kept,
as they are by default, and the file grows by every message while the rest stays flat. With
--uncompressed the 100 sessions grow to 2,000 messages each; once they outgrow the router's
session cache every turn reloads its whole session from disk, and throughput falls with
their length.

    python bench/soak.py [--messages 100000] [--every 10000] [--keep-history] [--uncompressed]
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.router_load import Load, bench_daemon, fake_bot_api, rss_mb  # noqa: E402
from rousseau.agent import Request, Response  # noqa: E402
from rousseau.agent.compress import DEFAULT_PROMPT as SUMMARISE  # noqa: E402
from rousseau.agent.testing import text_reply  # noqa: E402
from rousseau.log import configure_logging  # noqa: E402

BATCH = 500


def bookkeeping(db: Path) -> tuple[int, int]:
    with closing(sqlite3.connect(db, timeout=30)) as conn:
        inbox = conn.execute("SELECT count(*) FROM inbox").fetchone()[0]
        outbox = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
    return int(inbox), int(outbox)


def disk_mb(db: Path) -> float:
    """The database and its WAL, as they take space on disk."""
    files = [db, db.with_name(db.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) / 2**20


async def soak(
    url: str, total: int, every: int, *, compress: bool = True, keep_history: bool = False
) -> None:
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "s.db"

    async def answer(request: Request) -> Response:
        if request.system == SUMMARISE:
            return text_reply("Numbered messages, each answered with its echo.")
        return text_reply("echo: " + request.messages[-1].text)

    env = {"ROUSSEAU_AGENT_COMPRESSION_ENABLED": "true"} if compress else {}
    daemon, transport = bench_daemon(url, tmp, answer, **env)
    # Short ages so the sweep has work within the run.
    retention = daemon.config.state.retention
    retention.inbox = retention.outbox = retention.audit = retention.cron_runs = 20.0
    retention.compacted = None if keep_history else 20.0
    retention.interval = 5.0
    load = Load(url)
    lag = daemon.lag
    lag.every = 0.025  # a benchmark wants every short block, not the daemon's idle rest
    async with anyio.create_task_group() as tg:
        began = time.monotonic()
        tg.start_soon(daemon.run)
        with anyio.fail_after(30):
            while not transport.connected:
                await anyio.sleep(0.05)
        print(
            f"startup: connected after {time.monotonic() - began:.1f} s,"
            f" worst loop lag {lag.worst * 1000:.1f} ms"
        )
        print(
            f"{'messages':>9} {'db MB':>7} {'inbox':>7} {'outbox':>7} {'RSS MB':>7} {'msg/s':>6}"
            f" {'worst loop lag ms':>18}"
        )
        worst = lag.worst
        lag.worst = 0.0  # from here on, each row shows the worst of its own stretch
        started = last = time.monotonic()
        done = 0
        while done < total:
            step = min(every, total - done)
            for pushed in range(0, step, BATCH):
                await anyio.to_thread.run_sync(load.push, min(BATCH, step - pushed))
                await load.wait_for(load.n - 4 * BATCH)  # keep a bounded backlog
            await load.wait_for(load.n)
            done += step
            now = time.monotonic()
            inbox, outbox = await anyio.to_thread.run_sync(bookkeeping, db)
            print(
                f"{done:>9,} {disk_mb(db):>7.1f} {inbox:>7,} {outbox:>7,} {rss_mb():>7.1f}"
                f" {step / (now - last):>6.0f} {lag.worst * 1000:>18.1f}",
                flush=True,
            )
            worst = max(worst, lag.worst)
            lag.worst = 0.0
            last = now
        print(
            f"all {total:,} answered in {time.monotonic() - started:.0f} s;"
            f" worst loop lag of the whole run {worst * 1000:.1f} ms (target <= 50 ms)"
        )
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument(
        "--keep-history", action="store_true", help="keep the messages summaries replaced"
    )
    parser.add_argument(
        "--uncompressed", action="store_true", help="let sessions grow in memory as on disk"
    )
    args = parser.parse_args()
    configure_logging("error")
    run = functools.partial(soak, compress=not args.uncompressed, keep_history=args.keep_history)
    with fake_bot_api() as url:
        anyio.run(run, url, args.messages, args.every)


if __name__ == "__main__":
    main()
