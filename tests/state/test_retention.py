"""The retention sweep deletes finished rows past their age and never pending work."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.daemon import Daemon
from rousseau.policy import ChatPolicy
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from rousseau.transports.base import MemoryTransport
from tests.helpers import config_in

pytestmark = pytest.mark.anyio
DAY = 86400.0


@dataclass
class Ages:
    inbox: float = 30 * DAY
    outbox: float = 7 * DAY
    audit: float = 90 * DAY
    cron_runs: float = 30 * DAY
    compacted: float | None = None


def _seed(db: sqlite3.Connection, at: float, tag: str) -> None:
    for status in ("pending", "done", "ignored", "failed"):
        db.execute(
            "INSERT INTO inbox (transport, message_id, chat_id, sender_id, text, at, status,"
            " received_at) VALUES ('t', ?, 'c', 's', 'x', 0, ?, ?)",
            (f"{tag}-{status}", status, at),
        )
    for status in ("pending", "sent", "failed"):
        db.execute(
            "INSERT INTO outbox (transport, chat_id, text, status, next_attempt_at, created_at)"
            " VALUES ('t', 'c', ?, ?, 0, ?)",
            (f"{tag}-{status}", status, at),
        )
    db.execute(
        "INSERT INTO tool_calls (session_id, tool, input_digest, decision, started_at, duration,"
        " outcome) VALUES ('s', 'read', 'd', 'allow', ?, 0, 'ok')",
        (at,),
    )
    job = db.execute(
        "INSERT INTO cron_jobs (name, schedule, timezone, prompt, deliver_to, created_at,"
        " updated_at) VALUES (?, '@daily', 'UTC', 'p', 't:c', 0, 0)",
        (tag,),
    ).lastrowid
    for status in ("ok", "running"):
        db.execute(
            "INSERT INTO cron_runs (job_id, scheduled_at, status) VALUES (?, ?, ?)",
            (job, at + (status == "running"), status),
        )


async def test_the_sweep_keeps_recent_rows_and_every_pending_one() -> None:
    store = Store(":memory:")
    now = time.time()
    store.call_sync(lambda db: _seed(db, now - 100 * DAY, "old"), write=True)
    store.call_sync(lambda db: _seed(db, now - 1 * DAY, "new"), write=True)
    deleted = await DaemonState(store).sweep(Ages(), now=now)
    assert deleted == {"compacted": 0, "inbox": 3, "outbox": 2, "audit": 1, "cron_runs": 1}

    def left(db: sqlite3.Connection) -> dict[str, list[str]]:
        return {
            "inbox": [r[0] for r in db.execute("SELECT message_id FROM inbox ORDER BY 1")],
            "outbox": [r[0] for r in db.execute("SELECT text FROM outbox ORDER BY 1")],
            "cron": [r[0] for r in db.execute("SELECT status FROM cron_runs ORDER BY 1")],
        }

    rest = store.call_sync(left)
    assert rest["inbox"] == ["new-done", "new-failed", "new-ignored", "new-pending", "old-pending"]
    assert rest["outbox"] == ["new-failed", "new-pending", "new-sent", "old-pending"]
    assert sorted(rest["cron"]) == ["ok", "running", "running"]
    store.close()


async def test_messages_a_summary_replaced_go_after_their_age_when_one_is_set() -> None:
    store = Store(":memory:")
    now = time.time()

    def seed(db: sqlite3.Connection) -> None:
        db.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s', '', 0, 0)"
        )
        rows = [  # (text, compacted, age in days)
            ("old folded", 1, 100),
            ("new folded", 1, 1),
            ("old live", 0, 100),
        ]
        for text, compacted, age in rows:
            db.execute(
                "INSERT INTO messages (session_id, role, content, text, compacted, created_at)"
                " VALUES ('s', 'user', '[]', ?, ?, ?)",
                (text, compacted, now - age * DAY),
            )

    store.call_sync(seed, write=True)
    state = DaemonState(store)
    assert (await state.sweep(Ages(), now=now))["compacted"] == 0  # unset: kept for good
    assert (await state.sweep(Ages(compacted=30 * DAY), now=now))["compacted"] == 1

    def left(db: sqlite3.Connection) -> list[str]:
        return [r[0] for r in db.execute("SELECT text FROM messages ORDER BY id")]

    assert store.call_sync(left) == ["new folded", "old live"]
    assert [h.text for h in store.search_sync("folded")] == ["new folded"]  # the index follows
    store.close()


async def test_the_daemon_sweeps_on_its_interval(tmp_path: Path) -> None:
    config = config_in(tmp_path, ROUSSEAU_SHUTDOWN_GRACE="1s")
    config.state.retention.inbox = 0.5
    config.state.retention.outbox = 0.5
    config.state.retention.interval = 0.5
    memory = MemoryTransport()
    daemon = Daemon(
        config,
        transports={"memory": memory},
        chat_policies={"memory": ChatPolicy(policy="open")},
        provider=FunctionProvider(lambda request: text_reply("ok")),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(20):
            while not memory.connected:
                await anyio.sleep(0.02)
            await memory.inject("hello")
            await memory.wait_sent(1)
            while _count(tmp_path / "s.db", "inbox") or _count(tmp_path / "s.db", "outbox"):
                await anyio.sleep(0.1)
        daemon.stop()
    assert _count(tmp_path / "s.db", "messages") == 2  # sessions are never pruned
    metrics = daemon.metrics.render().decode()
    assert 'rousseau_pruned_rows_total{table="inbox"} 1.0' in metrics


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
