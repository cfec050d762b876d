"""Heartbeats on a real store with a clock the tests move: an answer of NOTHING sends nothing,
a finding is delivered, and nothing reaches the model outside the active hours, when nothing
changed, or over budget; the daemon keeps the `heartbeat:AGENT` job as the config says."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Agent, Message, Options, Usage
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.config.sections import BudgetConfig, HeartbeatConfig
from rousseau.costs import Meter, Metered, Price, Prices
from rousseau.cron import CronJobs, CronRunner, Scheduler
from rousseau.cron.heartbeat import NOTHING, Heartbeat, active, due_items, sync_jobs
from rousseau.router import ChatPolicy
from rousseau.state import Store
from rousseau.state.records import Charge
from rousseau.state.sqlite_cron import SqliteCronJobs
from rousseau.state.sqlite_spending import SqliteSpending
from rousseau.transports.base import MemoryTransport
from tests.cron.test_scheduler import Outbox

pytestmark = pytest.mark.anyio


class Clock:
    """The time of every part, the store's included (its sessions' times say when the
    heartbeat last looked), which the tests move on."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(time, "time", made)
    return made


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db") as made:
        yield made


class Beat:
    """A heartbeat every minute on a scheduler, its model answering `answer`."""

    def __init__(
        self,
        store: Store,
        tmp: Path,
        answer: str,
        clock: Clock,
        *,
        hours: str = "00:00-24:00",
        **budget: float,
    ) -> None:
        self.store = store
        self.clock = clock
        self.outbox = Outbox()
        self.model = FunctionProvider(lambda r: text_reply(answer, usage=Usage(input_tokens=1000)))
        self.spending = SqliteSpending(store)
        meter = Meter(
            self.spending,
            prices=Prices({"function": Price.of(10.0, 20.0)}),
            budgets={"default": BudgetConfig(**budget)},
            zone=UTC,
        )
        agent = Agent(Metered(self.model, meter, job="heartbeat"), options=Options(history=store))
        section = HeartbeatConfig(every=60, deliver_to="telegram:42", active_hours=hours)
        self.heartbeat = Heartbeat(
            name="default",
            agent=agent,
            section=section,
            workspace=str(tmp),
            store=store,
            zone=UTC,
            meter=meter,
            clock=self.clock,
        )
        jobs = SqliteCronJobs(store)
        runner = CronRunner(
            agent=agent, store=store, notify=self.outbox, heartbeats={"default": self.heartbeat}
        )
        self.cron = Scheduler(jobs=jobs, runner=runner, poll_interval=60, clock=self.clock)
        self.jobs = jobs

    async def start(self) -> None:
        await sync_jobs(CronJobs(self.jobs), {"default": self.heartbeat}, "UTC")

    async def minute(self) -> str:
        """A minute on: the heartbeat's run; its status."""
        self.clock.now += 61
        await self.cron.tick()
        return (await self.jobs.runs(limit=1))[0].status

    async def someone_talks(self) -> None:
        session = await self.store.create_session()
        await self.store.set_scope(session.id, owner="telegram:42", chat="telegram:42")
        await self.store.append_message(session.id, Message.user("hello"))
        await self.store.flush()


async def test_nothing_is_not_delivered_and_an_idle_install_costs_nothing(
    store: Store, tmp_path: Path, clock: Clock
) -> None:
    beat = Beat(store, tmp_path, NOTHING, clock)
    await beat.start()
    [job] = await beat.jobs.all()
    assert (job.name, job.schedule, job.misfire) == ("heartbeat:default", "@every 60s", "skip")
    assert await beat.minute() == "skipped"  # nobody ever talked: no model call
    assert beat.model.requests == []
    await beat.someone_talks()
    assert await beat.minute() == "ok"  # something changed: the agent looks
    assert len(beat.model.requests) == 1 and beat.outbox.sent == []  # NOTHING: not sent
    assert await beat.minute() == "skipped"  # nothing since its last look
    assert len(beat.model.requests) == 1


async def test_a_finding_is_delivered_with_what_came_due(
    store: Store, tmp_path: Path, clock: Clock
) -> None:
    beat = Beat(store, tmp_path, "The dentist is at 15:00 today.", clock)
    await beat.start()
    soon = datetime.fromtimestamp(beat.clock.now + 30, UTC).strftime("%Y-%m-%d %H:%M")
    (tmp_path / "HEARTBEAT.md").write_text(
        f"# Things to watch\n- {soon} dentist appointment\n- [x] 2020-01-01 done long ago\n"
    )
    assert await beat.minute() == "ok"  # the notes changed and an item came due
    assert beat.outbox.sent == [("telegram", "42", "The dentist is at 15:00 today.")]
    [request] = beat.model.requests
    prompt = request.messages[-1].text
    assert "HEARTBEAT.md:\n# Things to watch" in prompt
    assert f"Due since the last check-in:\n- {soon} dentist appointment" in prompt
    assert "answer exactly NOTHING" in prompt
    assert await beat.minute() == "skipped"  # said once: the item is not due again


async def test_nothing_runs_outside_the_active_hours(
    store: Store, tmp_path: Path, clock: Clock
) -> None:
    hour = datetime.fromtimestamp(clock.now + 61, UTC).hour
    away = f"{(hour + 2) % 24:02d}:00-{(hour + 3) % 24:02d}:00"
    beat = Beat(store, tmp_path, "hi", clock, hours=away)
    await beat.start()
    await beat.someone_talks()
    assert await beat.minute() == "skipped"
    assert beat.model.requests == [] and beat.outbox.sent == []


async def test_nothing_runs_over_budget(store: Store, tmp_path: Path, clock: Clock) -> None:
    beat = Beat(store, tmp_path, "hi", clock, daily_usd=0.5)
    await beat.start()
    today = datetime.fromtimestamp(clock.now, UTC).strftime("%Y-%m-%d")
    await beat.spending.record(
        Charge(at=clock.now, day=today, agent="default", person="", session_id="s",
               job="turn", model="function", usd=0.75)
    )  # fmt: skip
    await beat.someone_talks()
    assert await beat.minute() == "skipped"
    assert beat.model.requests == [] and beat.outbox.sent == []
    [run] = await beat.jobs.runs(limit=1)
    assert run.error is not None and "$0.75 spent today of $0.50" in run.error


def test_active_hours_and_due_items() -> None:
    at = datetime(2026, 12, 4, 23, 30, tzinfo=UTC)
    assert active("22:00-06:00", at) and not active("08:00-22:00", at)
    assert active("00:00-24:00", at.replace(hour=0, minute=0))
    now = at.timestamp()
    notes = "- 09:00 standup\n- 23:15 stretch\n- 2026-12-04 23:20 call\n- [x] 23:25 done"
    assert due_items(notes, now - 1800, now, UTC) == ["- 23:15 stretch", "- 2026-12-04 23:20 call"]
    assert due_items(notes, now - 60, now, UTC) == []


@asynccontextmanager
async def daemon(tmp: Path, heartbeat: dict[str, object] | None) -> AsyncIterator[None]:
    from rousseau.daemon import Daemon

    path = tmp / "config.yaml"
    agent: dict[str, object] = {"workspace": str(tmp / "ws")}
    if heartbeat is not None:
        agent["heartbeat"] = heartbeat
    path.write_text(json.dumps({"state": {"path": str(tmp / "s.db")}, "agent": agent}))
    transport = MemoryTransport()
    running = Daemon(
        load_config(str(path), {"HOME": str(tmp)}),
        transports={"memory": transport},
        chat_policies={"memory": ChatPolicy(allowlist=frozenset({"alice"}))},
        provider=FunctionProvider(lambda r: text_reply(NOTHING)),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(running.run)
        with anyio.fail_after(20):
            while not transport.connected:
                await anyio.sleep(0.02)
        yield
        running.stop()


async def test_the_daemon_keeps_the_heartbeat_job_as_configured(tmp_path: Path) -> None:
    async def jobs() -> list[tuple[str, str, str]]:
        with Store(tmp_path / "s.db") as store:
            return [(j.name, j.schedule, j.deliver_to) for j in await SqliteCronJobs(store).all()]

    async with daemon(tmp_path, {"every": "30m", "deliver_to": "telegram:42"}):
        pass
    assert await jobs() == [("heartbeat:default", "@every 1800s", "telegram:42")]
    async with daemon(tmp_path, {"every": "1h", "deliver_to": "telegram:42"}):
        pass
    assert await jobs() == [("heartbeat:default", "@every 3600s", "telegram:42")]
    async with daemon(tmp_path, None):
        pass
    assert await jobs() == []


def test_heartbeat_config_errors_name_the_key(tmp_path: Path) -> None:
    from rousseau.agent import ConfigError

    path = tmp_path / "config.yaml"
    for bad, key in (
        ({"every": "10s", "deliver_to": "memory:a"}, "agent.heartbeat.every"),
        ({"deliver_to": "alice"}, "agent.heartbeat.deliver_to"),
        ({"deliver_to": "memory:a", "active_hours": "8-22"}, "agent.heartbeat.active_hours"),
    ):
        path.write_text(json.dumps({"agent": {"heartbeat": bad}}))
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(str(path), {"HOME": str(tmp_path)})


async def test_a_heartbeat_name_is_no_one_elses(store: Store) -> None:
    from rousseau.cron import CronError

    with pytest.raises(CronError, match=r"heartbeat:… names are agent\.heartbeat's"):
        await CronJobs(SqliteCronJobs(store)).add(
            "heartbeat:default", "@hourly", "hi", "telegram:42", timezone="UTC"
        )
