"""The scheduler against a real store with a clock the tests move: fire times, restarts,
two daemons on one database, downtime, removal, failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Agent, Options, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.cron import CronJobs, CronRunner, Scheduler
from rousseau.state import Store
from rousseau.state.sqlite_cron import SqliteCronJobs

pytestmark = pytest.mark.anyio
T0 = 1_795_996_800.0  # 2026-11-30 00:00 UTC


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    async def __call__(
        self, transport: str, recipient: str, text: str, buttons: object = (), *, files: object = ()
    ) -> int:
        self.sent.append((transport, recipient, text))
        return 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db") as made:
        yield made


def answer(request: Request) -> Response:
    prompt = request.messages[-1].text
    if "fail" in prompt:
        raise RuntimeError("the model is down")
    return text_reply(f"done: {prompt}")


def scheduler(store: Store, clock: Clock, outbox: Outbox, **runner: object) -> Scheduler:
    agent = Agent(FunctionProvider(answer), options=Options(history=store))
    run = CronRunner(agent=agent, store=store, notify=outbox, **runner)  # type: ignore[arg-type]
    return Scheduler(jobs=SqliteCronJobs(store), runner=run, poll_interval=60, clock=clock)


async def add(store: Store, name: str, schedule: str, **options: object) -> None:
    await CronJobs(SqliteCronJobs(store)).add(
        name,
        schedule,
        f"report {name}",
        "telegram:42",
        timezone="UTC",
        now=T0,
        **options,  # type: ignore[arg-type]
    )


async def statuses(store: Store) -> list[str]:
    return [r.status for r in reversed(await SqliteCronJobs(store).runs())]


async def test_a_job_fires_at_its_time_and_not_before(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "daily", "0 9 * * *")
    cron = scheduler(store, clock, outbox)
    soonest = await cron.tick()
    assert outbox.sent == [] and soonest == T0 + 9 * 3600  # T0 is midnight UTC
    clock.now = soonest - 1
    await cron.tick()
    assert outbox.sent == []
    clock.now = soonest + 0.2
    await cron.tick()
    assert outbox.sent == [("telegram", "42", "done: report daily")]
    [job] = await SqliteCronJobs(store).all()
    assert job.last_status == "ok" and job.next_run_at == soonest + 86400
    [run] = await SqliteCronJobs(store).runs()
    assert run.scheduled_at == soonest and run.status == "ok" and run.session_id
    info = await anyio.to_thread.run_sync(store.info_sync, run.session_id)
    assert info is not None and info.title == "cron: daily" and info.message_count == 2


async def test_a_restart_does_not_fire_twice(store: Store, tmp_path: Path) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "often", "@every 5m")
    clock.now = T0 + 300.5
    await scheduler(store, clock, outbox).tick()
    assert len(outbox.sent) == 1
    # the same moment, a new scheduler (a restarted daemon), and a second store on the file
    await scheduler(store, clock, outbox).tick()
    with Store(tmp_path / "s.db") as other:
        await scheduler(other, clock, outbox).tick()
    assert len(outbox.sent) == 1


async def test_two_daemons_claim_each_time_once(store: Store, tmp_path: Path) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "often", "@every 1m")
    with Store(tmp_path / "s.db") as other:
        one, two = scheduler(store, clock, outbox), scheduler(other, clock, outbox)
        for minute in range(1, 6):
            clock.now = T0 + 60 * minute + 0.1
            async with anyio.create_task_group() as tg:
                tg.start_soon(one.tick)
                tg.start_soon(two.tick)
    assert len(outbox.sent) == 5
    assert await statuses(store) == ["ok"] * 5


async def test_downtime_runs_once_and_records_the_missed(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "hourly", "@hourly")
    clock.now = T0 + 5 * 3600 + 600  # down through five scheduled times
    await scheduler(store, clock, outbox).tick()
    assert len(outbox.sent) == 1
    assert await statuses(store) == ["missed"] * 4 + ["ok"]
    runs = await SqliteCronJobs(store).runs()
    assert runs[0].scheduled_at == T0 + 5 * 3600  # the newest ran


async def test_downtime_with_skip_runs_nothing_late(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "hourly", "@hourly", misfire="skip")
    clock.now = T0 + 3 * 3600 + 600
    cron = scheduler(store, clock, outbox)
    await cron.tick()
    assert outbox.sent == [] and await statuses(store) == ["missed"] * 3
    clock.now = T0 + 4 * 3600 + 1  # on time again: runs
    await cron.tick()
    assert len(outbox.sent) == 1


async def test_removed_and_disabled_jobs_do_not_run(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "gone", "@every 1m")
    await add(store, "paused", "@every 1m")
    jobs = CronJobs(SqliteCronJobs(store))
    await jobs.remove("gone")
    await jobs.set_enabled("paused", False)
    clock.now = T0 + 3600
    await scheduler(store, clock, outbox).tick()
    assert outbox.sent == [] and await jobs.store.runs() == []


async def test_enabling_counts_from_now_without_catching_up(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await add(store, "paused", "@every 1m", enabled=False)
    jobs = CronJobs(SqliteCronJobs(store))
    job = await jobs.set_enabled("paused", True, T0 + 3600)
    assert job.next_run_at == T0 + 3660
    clock.now = T0 + 3600
    await scheduler(store, clock, outbox).tick()
    assert outbox.sent == []


async def test_a_failure_is_recorded_and_the_target_told(store: Store) -> None:
    clock, outbox = Clock(), Outbox()
    await CronJobs(SqliteCronJobs(store)).add(
        "broken", "@every 1m", "fail please", "telegram:42", now=T0
    )
    clock.now = T0 + 60.1
    await scheduler(store, clock, outbox).tick()
    [run] = await SqliteCronJobs(store).runs()
    assert run.status == "failed" and "the model is down" in (run.error or "")
    assert outbox.sent == [("telegram", "42", f"Cron job broken failed: {run.error}")]


async def test_a_slow_turn_times_out(store: Store) -> None:
    async def slow(request: Request) -> Response:
        await anyio.sleep(5)
        return text_reply("too late")

    clock, outbox = Clock(), Outbox()
    await add(store, "slow", "@every 1m")
    runner = CronRunner(
        agent=Agent(FunctionProvider(slow)),
        store=store,
        notify=outbox,
        timeout=0.2,
        notify_failures=False,
    )
    cron = Scheduler(jobs=SqliteCronJobs(store), runner=runner, clock=clock)
    clock.now = T0 + 60.1
    await cron.tick()
    [run] = await SqliteCronJobs(store).runs()
    assert (run.status, run.error) == ("failed", "timed out") and outbox.sent == []


async def test_dst_change_in_the_jobs_zone(store: Store) -> None:
    """Europe/Berlin falls back on 2026-10-25: 02:30 happens twice, the job runs once."""
    clock, outbox = Clock(), Outbox()
    start = 1_792_836_000.0  # 2026-10-24 12:00 Berlin
    await CronJobs(SqliteCronJobs(store)).add(
        "night", "30 2 * * *", "night", "telegram:42", timezone="Europe/Berlin", now=start
    )
    cron = scheduler(store, clock, outbox)
    clock.now = start
    for _ in range(2 * 24 * 4):  # two days, every 15 minutes
        clock.now += 900
        await cron.tick()
    fired = [r.scheduled_at for r in reversed(await SqliteCronJobs(store).runs())]
    assert [t - start for t in fired] == [14.5 * 3600, 39.5 * 3600]  # 02:30 CEST, 02:30 CET


async def test_a_clock_set_back_recomputes_the_next_run(store: Store) -> None:
    """An NTP correction or a restored snapshot: the clock ran 30 days ahead, then came back.
    The job's next run was worked out at the later time; it is worked out again, so the job
    keeps running (it stopped until the clock caught up with the stored time)."""
    clock, outbox = Clock(), Outbox()
    await add(store, "often", "@every 5m")
    cron = scheduler(store, clock, outbox)
    await cron.tick()
    clock.now = T0 + 30 * 86_400 + 1  # forward: one run, not a burst of the missed ones
    await cron.tick()
    assert len(outbox.sent) == 1
    clock.now = T0 + 60  # back to the real time
    soonest = await cron.tick()
    assert soonest == T0 + 300
    clock.now = T0 + 301
    await cron.tick()
    assert len(outbox.sent) == 2
    (job,) = await SqliteCronJobs(store).all()
    assert job.next_run_at == T0 + 600


async def test_settling_waits_for_the_running_turn_and_starts_no_more(store: Store) -> None:
    """A daemon's stop: the run going on finishes and queues its reply before the daemon
    delivers what is queued; nothing due after that is started (the next start runs it)."""
    going, release = anyio.Event(), anyio.Event()

    async def slow(request: Request) -> Response:
        going.set()
        await release.wait()
        return text_reply("finished")

    clock, outbox = Clock(), Outbox()
    await add(store, "often", "@every 1m")
    runner = CronRunner(agent=Agent(FunctionProvider(slow)), store=store, notify=outbox)
    cron = Scheduler(jobs=SqliteCronJobs(store), runner=runner, poll_interval=0.05, clock=clock)
    async with anyio.create_task_group() as tg:
        await tg.start(cron.run)
        clock.now = T0 + 60.1
        cron.wake()
        await going.wait()
        settled = anyio.Event()

        async def settle() -> None:
            await cron.settle()
            settled.set()

        tg.start_soon(settle)
        await anyio.sleep(0.2)
        assert not settled.is_set()  # the run is still going
        release.set()
        with anyio.fail_after(5):
            await settled.wait()
        assert outbox.sent == [("telegram", "42", "finished")]
        clock.now = T0 + 180.1  # two more times are due: a stopping daemon starts neither
        cron.wake()
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    assert await statuses(store) == ["ok"]
