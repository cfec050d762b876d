"""The faults of the chaos benchmark, each a row (or, for poison, a row per transport): a
stage is set up, traffic flows, the fault is inflicted and ends, the traffic stops, the
daemons answer what is left and are stopped with SIGTERM, and then everything is counted.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos_daemons import (
    LEASE,
    Clock,
    PostgresBackend,
    SQLiteBackend,
    Tmpfs,
    postgres_server,
)
from bench.chaos_platforms import ALL
from bench.chaos_stage import Stage
from bench.chaos_traffic import Count, Mark, Traffic, tally

LOAD = ["telegram", "slack"]
"""The platforms that carry the load: both keep what was not acknowledged and deliver it
again, as the real ones do, so a daemon killed mid-intake loses nothing on the wire."""
CLOCK_TEST = "tests/cron/test_scheduler.py::test_a_clock_set_back_recomputes_the_next_run"


@dataclass(kw_only=True, slots=True)
class Plan:
    """How long and how often: a full run, or --quick."""

    kills: int = 3
    chats: int = 10
    """Chats per platform."""
    rate: float = 5.0
    """Messages a second on each load platform: well within what three daemons on two
    busy cores answer, so what is timed is the recovery, not a queue of the load's making."""
    lead: float = 3.0
    """Seconds of traffic before a fault, and after it ends."""
    between_kills: float = 6.0
    disk_s: float = 8.0
    hang_s: float = 20.0
    clock_after_s: float = 10.0
    settle_s: float = 60.0
    """The longest wait for every message to be answered once the traffic stops."""


@dataclass(kw_only=True, slots=True)
class Row:
    backend: str
    fault: str
    count: Count | None = None
    kills: int = 0
    """Kills in this row: each may resend one reply at the send boundary."""
    skipped: str = ""
    """Why the row was not run."""
    failed: str = ""
    """Why the row could not be measured (its daemons never answered a first message)."""
    notes: list[str] = field(default_factory=list)

    def met(self) -> bool:
        c = self.count
        if c is None:
            return not self.failed
        return c.lost == 0 and c.doubled == 0 and c.resent <= self.kills


Backend = SQLiteBackend | PostgresBackend


def _settle(stage: Stage, traffic: Traffic, plan: Plan, backend: Backend) -> list[str]:
    """Stop the traffic, wait for the answers, stop the daemons: what to note."""
    traffic.stop()
    wait = plan.settle_s + (LEASE if isinstance(backend, PostgresBackend) else 0.0)
    notes = []
    if not stage.watch.wait(traffic.texts, timeout=wait):
        notes.append(f"not all answered {wait:g} s after the traffic stopped")
    exits = stage.stop()
    if any(exits):
        notes.append(f"exit codes on SIGTERM: {exits}")
    errors = stage.errors()
    if errors:
        short = [name if len(name) < 80 else name[:77] + "..." for name in errors]
        counted = {name: short.count(name) for name in sorted(set(short))}
        notes.append(f"logged errors: {counted}")
    if traffic.failed:
        notes.append(f"{len(traffic.failed)} messages the platform could not deliver")
    return notes


def _row(
    backend: Backend,
    fault: str,
    stage: Stage,
    traffic: Traffic,
    plan: Plan,
    *,
    marks: list[Mark],
    kills: Sequence[float] = (),
) -> Row:
    notes = _settle(stage, traffic, plan, backend)
    outbox, arrived = backend.ledger()
    count = tally(
        traffic.sent, stage.replies(), outbox=outbox, arrived=arrived, kills=kills, marks=marks
    )
    if count.other:
        notes.append(f"{count.other} replies that answer no message of the row")
    if count.lost_texts:
        notes.append(f"lost: {count.lost_texts[:5]}")
    if count.doubled_texts:
        notes.append(f"doubled: {count.doubled_texts[:5]}")
    if count.resent:
        notes.append(f"resent at the send boundary, by kill: {count.resent_by_kill}")
    return Row(backend=backend.name, fault=fault, count=count, kills=len(kills), notes=notes)


@contextlib.contextmanager
def _staged(stage: Stage) -> Iterator[Stage]:
    try:
        stage.start()
        yield stage
    finally:
        stage.close()


def kill(backend: Backend, root: Path, plan: Plan) -> Row:
    """kill -9 under load, `plan.kills` times, each daemon started again at once: on
    PostgreSQL the one polling Telegram (its poller moves, its claimed work is adopted)."""
    with _staged(Stage(backend, LOAD, root, chats=plan.chats)) as stage:
        traffic = Traffic("kill", stage.platforms, chats=plan.chats, rate=plan.rate).start()
        jitter = random.Random()
        kills: list[float] = []
        marks: list[Mark] = []
        between = plan.between_kills + (LEASE if isinstance(backend, PostgresBackend) else 0.0)
        for _ in range(plan.kills):
            time.sleep(between + jitter.uniform(0.0, 0.5))  # a random moment under load
            victim = stage.member_polling("telegram")
            victim.kill()
            kills.append(time.time())
            victim.start()
            marks.append(Mark(end=time.time()))
        time.sleep(plan.lead)
        fault = f"kill -9 x{plan.kills} under load"
        return _row(backend, fault, stage, traffic, plan, marks=marks, kills=kills)


def disk(backend: Backend, root: Path, plan: Plan) -> Row:
    """The disk of the store fills up under load, then space is freed: a SQLite file on a
    small tmpfs, or (PostgreSQL) the server's data folder on one."""
    fault = f"disk full for {plan.disk_s:g} s"
    if reason := Tmpfs.unavailable():
        return Row(backend=backend.name, fault=fault, skipped=reason)
    if isinstance(backend, SQLiteBackend):
        tmpfs = Tmpfs(root / "disk", 16).mount()
        try:
            stage = Stage(backend, LOAD, root, chats=plan.chats, state_dir=tmpfs.where)
            return _fill(backend, stage, tmpfs, fault, plan)
        finally:
            tmpfs.unmount()
    with postgres_server(tmpfs_mib=192) as (server, data):
        assert data is not None
        own = PostgresBackend(server)
        own.new_database()
        return _fill(own, Stage(own, LOAD, root, chats=plan.chats), data, fault, plan)


def _fill(backend: Backend, stage: Stage, tmpfs: Tmpfs, fault: str, plan: Plan) -> Row:
    with _staged(stage):
        traffic = Traffic("disk", stage.platforms, chats=plan.chats, rate=plan.rate).start()
        time.sleep(plan.lead)
        tmpfs.fill()
        time.sleep(plan.disk_s)
        tmpfs.free()
        marks = [Mark(end=time.time())]
        time.sleep(plan.lead)
        return _row(backend, fault, stage, traffic, plan, marks=marks)


def hang(backend: Backend, root: Path, plan: Plan) -> Row:
    """The model stops answering for `plan.hang_s` seconds: requests wait, unanswered."""
    with _staged(Stage(backend, LOAD, root, chats=plan.chats)) as stage:
        traffic = Traffic("hang", stage.platforms, chats=plan.chats, rate=plan.rate).start()
        time.sleep(plan.lead)
        stage.model.hang()
        time.sleep(plan.hang_s)
        stage.model.resume()
        marks = [Mark(end=time.time())]
        time.sleep(plan.lead)
        fault = f"model hung for {plan.hang_s:g} s"
        return _row(backend, fault, stage, traffic, plan, marks=marks)


def clock(backend: Backend, root: Path, plan: Plan) -> Row:
    """A daemon's wall clock is set back an hour under load (libfaketime; its monotonic
    clock runs on, as when NTP or an administrator steps the clock): on PostgreSQL, the
    daemon polling Telegram."""
    fault = "clock set back 1 h"
    if reason := Clock.unavailable():
        return Row(backend=backend.name, fault=fault, skipped=f"{reason}; covered by {CLOCK_TEST}")
    with _staged(Stage(backend, LOAD, root, chats=plan.chats, clocks=True)) as stage:
        traffic = Traffic("clock", stage.platforms, chats=plan.chats, rate=plan.rate).start()
        time.sleep(plan.lead)
        victim = stage.member_polling("telegram")
        stage.clocks[stage.members.index(victim)].set_back(3600)
        marks = [Mark(end=time.time())]
        time.sleep(plan.clock_after_s)
        row = _row(backend, fault, stage, traffic, plan, marks=marks)
    # Under libfaketime with the monotonic clock left alone, Python's time.sleep fails.
    if any("[Errno 22] Invalid argument" in m.tail(10**6) for m in stage.members):
        row.notes.append("a sleep in the daemon failed under libfaketime (EINVAL)")
    return row


def poison(backend: Backend, root: Path, plan: Plan) -> list[Row]:
    """On every transport a fake speaks, malformed events from a chat, then a message from
    each chat: a row per transport."""
    with _staged(Stage(backend, list(ALL), root, chats=plan.chats)) as stage:
        traffic = Traffic("poison", stage.platforms, chats=plan.chats, rate=plan.rate)
        marks: dict[str, Mark] = {}
        made: dict[str, int] = {}
        for platform in stage.platforms:
            made[platform.name] = platform.poison(platform.chat(0))
            end = time.time()
            awaited = []
            for i in range(plan.chats):
                chat = platform.chat(i)
                text = f"poison-{chat}-1"
                traffic.send(platform, chat, text)
                awaited.append(text)
            marks[platform.name] = Mark(end=end, awaited=awaited)
        notes = _settle(stage, traffic, plan, backend)
        outbox, arrived = backend.ledger()
        refused = _refused(stage)
        restarts = stage.events("transport.failed", "transport.restart")
    rows = []
    for name, mark in marks.items():
        sent = [s for s in traffic.sent if s.transport == name]
        seen = [s for s in stage.replies() if s.transport == name]
        count = tally(sent, seen, outbox=outbox, arrived=arrived, marks=[mark])
        row_notes = [f"{refused.get(name, 0)} of {made[name]} recorded as refused"]
        if any(restarts.values()):
            row_notes.append(f"transport restarts: {restarts}")
        if count.lost_texts:
            row_notes.append(f"lost: {count.lost_texts[:5]}")
        fault = f"poison: {name}, {made[name]} malformed"
        rows.append(Row(backend=backend.name, fault=fault, count=count, notes=row_notes))
    rows[0].notes.extend(f"the stage of every poison row: {note}" for note in notes)
    return rows


def _refused(stage: Stage) -> dict[str, int]:
    """Events each transport recorded as unreadable (`TRANSPORT.bad_...`), over the daemons."""
    out: dict[str, int] = {}
    for member in stage.members:
        for event in member.events():
            name = str(event.get("event", ""))
            transport, _, what = name.partition(".")
            if what.startswith("bad_"):
                out[transport] = out.get(transport, 0) + 1
    return out


FAULTS: dict[str, Callable[[Backend, Path, Plan], Row | list[Row]]] = {
    "kill": kill,
    "disk": disk,
    "poison": poison,
    "hang": hang,
    "clock": clock,
}
"""Each fault by its name on the command line, in the order a run takes them."""
