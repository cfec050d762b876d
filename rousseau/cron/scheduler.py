"""The scheduler: re-reads the job table, claims due runs, runs them as agent turns.

Each job's next run time is kept in its row. A tick takes every enabled job whose time has
come, works out the scheduled times it passed (several after downtime), claims one run row per
time in the store (so no time runs twice, across restarts and between daemons sharing the
database), runs the newest (misfire `run_once`, or when on time) and records the rest missed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from rousseau.agent import Agent, Attachment, BudgetExceededError
from rousseau.costs import Payer, paying
from rousseau.cron.jobs import RESERVED, CronError, schedule_of, target_of
from rousseau.cron.schedule import Schedule, ScheduleError
from rousseau.messages import DEFAULT_AGENT, OutgoingFiles, outgoing_files
from rousseau.state import SessionStore
from rousseau.state.protocol import JobStore
from rousseau.state.records import CronJob, RunStatus

if TYPE_CHECKING:
    from rousseau.cron.heartbeat import Heartbeat

log = structlog.get_logger("rousseau.cron")


class Notify(Protocol):
    """notify(transport, recipient, text, files=...): queue a message (and files with their
    captions) for delivery through the outbox."""

    def __call__(
        self,
        transport: str,
        recipient: str,
        text: str,
        /,
        buttons: tuple[str, ...] = (),
        *,
        files: Sequence[tuple[Attachment, str]] = (),
    ) -> Awaitable[int]: ...


HEARTBEAT = RESERVED
"""The name of an agent's heartbeat job (cron/heartbeat.py), before the agent's name."""
MISSED_ROWS = 100  # missed times recorded per catch-up (older ones are only counted in the log)
CATCH_UP_WINDOW = 86_400.0  # scheduled times older than this after downtime are not listed


@dataclass(frozen=True, slots=True)
class RunOutcome:
    status: RunStatus
    session_id: str
    error: str = ""
    text: str = ""


@dataclass(kw_only=True)
class CronRunner:
    """Runs one job: a fresh session titled `cron: NAME`, one unattended turn under a timeout,
    the reply (or, if configured, a one-line failure notice) queued for its target."""

    agent: Agent
    """The default agent, and of any job naming an agent that is not in `agents`."""
    store: SessionStore
    notify: Notify
    timeout: float = 300.0
    notify_failures: bool = True
    agents: dict[str, Agent] = field(default_factory=dict)
    """The other agents a job may name."""
    heartbeats: Mapping[str, Heartbeat] = field(default_factory=dict)
    """The agents' heartbeats, which run their `heartbeat:AGENT` jobs."""

    async def run(self, job: CronJob) -> RunOutcome:
        if job.name.startswith(HEARTBEAT):
            heartbeat = self.heartbeats.get(job.name.removeprefix(HEARTBEAT))
            if heartbeat is None:  # the config dropped it since (the next start removes it)
                return RunOutcome("skipped", "", error="no heartbeat is configured for it")
            with anyio.fail_after(self.timeout):
                return await heartbeat.run(job, self.notify)
        transport, recipient = target_of(job)
        session = await self.store.create_session(title=f"cron: {job.name}")
        # its replies land in the target chat: recall there may find them
        await self.store.set_scope(
            session.id, owner=job.deliver_to, chat=job.deliver_to, agent=job.agent
        )
        with structlog.contextvars.bound_contextvars(job=job.name, session=session.id):
            outgoing = OutgoingFiles(transport=transport)
            outgoing_files.set(outgoing)  # send_file in a job: the files go with its reply
            paying.set(Payer(agent=job.agent, session_id=session.id, job="cron"))
            try:
                agent = self._agent_of(job)
                with anyio.fail_after(self.timeout):
                    response = await agent.reply(session, job.prompt, unattended=True)
                text = response.message.text.strip() or f"(cron job {job.name}: no reply)"
            except BudgetExceededError as exc:  # the owners are told by the meter, once a day
                log.warning("cron.over_budget", error=str(exc))
                return RunOutcome("skipped", session.id, error=str(exc))
            except Exception as exc:
                error = _one_line(exc)
                log.warning("cron.failed", error=error)
                if self.notify_failures:
                    await self.notify(transport, recipient, f"Cron job {job.name} failed: {error}")
                return RunOutcome("failed", session.id, error=error)
            await self.notify(transport, recipient, text, files=outgoing.files)
            log.info("cron.done", target=job.deliver_to)
            return RunOutcome("ok", session.id, text=text)

    def _agent_of(self, job: CronJob) -> Agent:
        if job.agent == DEFAULT_AGENT:
            return self.agent
        agent = self.agents.get(job.agent)
        if agent is None:  # the config lost it since: not run as another agent instead
            raise CronError(f"no agent named {job.agent!r} is configured")
        return agent


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


@dataclass(kw_only=True)
class Scheduler:
    jobs: JobStore
    """Where the jobs are kept: the scheduler only reads, claims and moves them on."""
    runner: CronRunner
    poll_interval: float = 60.0
    clock: Callable[[], float] = time.time
    grace: float = 0.0
    """How late a run may start and still count as on time (default: poll_interval + 60s)."""
    _schedules: dict[tuple[int, float], Schedule] = field(default_factory=dict)
    _running: set[int] = field(default_factory=set)
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _ticking: bool = False
    _settling: bool = False
    _active: int = 0
    """Runs claimed and not yet finished: `settle` waits for them."""
    _calmer: anyio.Event = field(default_factory=anyio.Event)
    """Set when a tick or a run ends."""

    def __post_init__(self) -> None:
        if not self.grace:
            self.grace = self.poll_interval + 60.0

    def wake(self) -> None:
        """Re-read the table now (a job was added or changed in this process)."""
        self._wake.set()

    async def settle(self) -> None:
        """Start no more runs; return once the running ones have finished and queued their
        replies (the daemon's stop, before it delivers what is queued)."""
        self._settling = True
        while self._ticking or self._active:
            self._calmer = anyio.Event()
            await self._calmer.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            task_status.started()
            log.info("cron.started", poll_interval=self.poll_interval)
            while True:
                self._wake = anyio.Event()
                self._ticking = True
                try:
                    soonest = None if self._settling else await self.tick(tg)
                except Exception:  # a broken row or a busy store must not end cron
                    log.exception("cron.tick_failed")
                    soonest = None
                finally:
                    self._ticking = False
                    self._calmer.set()
                now = self.clock()
                wait = self.poll_interval if soonest is None else soonest - now
                with anyio.move_on_after(max(0.0, min(wait, self.poll_interval))):
                    await self._wake.wait()

    def _schedule(self, job: CronJob) -> Schedule | None:
        key = (job.id, job.updated_at)
        found = self._schedules.get(key)
        if found is None:
            try:
                found = schedule_of(job)
            except ScheduleError as exc:
                log.error("cron.bad_schedule", job=job.name, error=str(exc))
                return None
            if len(self._schedules) > 10_000:
                self._schedules.clear()
            self._schedules[key] = found
        return found

    async def tick(self, tg: TaskGroup | None = None) -> float | None:
        """Handle every due job once; return the soonest next run time of any job.

        With `tg`, runs start in the background; without, they run before tick returns."""
        now = self.clock()
        upcoming: list[float | None] = []
        for job in await self.jobs.all():
            if self._settling:  # the daemon is stopping: the next start runs what is due
                break
            schedule = self._schedule(job) if job.enabled else None
            if schedule is None:
                continue
            next_run = job.next_run_at
            if next_run is None:  # never worked out (or the schedule has no more times)
                next_run = schedule.next_after(now)
                await self.jobs.advance(job, next_run)
            elif next_run <= now:
                next_run = await self._due(job, schedule, next_run, now, tg)
            elif (expected := schedule.next_after(now)) is not None and next_run > expected:
                # Worked out at a later time than now: the wall clock went back (an NTP
                # correction, a machine restored from a snapshot). Waiting for the stored time
                # would skip every run in between.
                log.warning("cron.clock_went_back", job=job.name, stored=next_run, now=now)
                next_run = expected
                await self.jobs.advance(job, next_run)
            upcoming.append(next_run)
        return min((t for t in upcoming if t is not None), default=None)

    async def _due(
        self, job: CronJob, schedule: Schedule, first: float, now: float, tg: TaskGroup | None
    ) -> float | None:
        start = max(first, now - CATCH_UP_WINDOW)
        passed = ([first] if start == first else []) + schedule.between(start, now)
        skipped_old = first < start
        latest = passed[-1] if passed else first
        on_time = now - latest <= self.grace
        run_it = job.misfire == "run_once" or on_time
        missed = passed[:-1] if run_it else passed
        # Claim first, then move the job on: a crash in between loses no claim, and a claim
        # is what keeps a time from running twice.
        for moment in missed[-MISSED_ROWS:]:
            await self.jobs.claim(job, moment, "missed", "the daemon was not running")
        if missed or skipped_old:
            log.info(
                "cron.missed",
                job=job.name,
                count=len(missed),
                older_not_listed=skipped_old,
                misfire=job.misfire,
            )
        run_id = await self.jobs.claim(job, latest) if run_it else None
        following = schedule.next_after(now)
        await self.jobs.advance(job, following)
        if run_it and run_id is None:
            log.info("cron.already_claimed", job=job.name, scheduled=latest)
        elif run_id is not None:
            self._active += 1
            if tg is not None:
                tg.start_soon(self._run, job, run_id, latest)
            else:
                await self._run(job, run_id, latest)
        return following

    async def _run(self, job: CronJob, run_id: int, scheduled_at: float) -> None:
        try:
            await self._run_claimed(job, run_id, scheduled_at)
        finally:
            self._active -= 1
            self._calmer.set()

    async def _run_claimed(self, job: CronJob, run_id: int, scheduled_at: float) -> None:
        if job.id in self._running:  # the previous run is still going: do not pile up
            await self.jobs.finish(run_id, job, "skipped", error="the previous run was still going")
            log.warning("cron.skipped", job=job.name, reason="previous run still going")
            return
        self._running.add(job.id)
        log.info(
            "cron.fired", job=job.name, scheduled=scheduled_at, late=self.clock() - scheduled_at
        )
        try:
            outcome = await self.runner.run(job)
            await self.jobs.finish(
                run_id, job, outcome.status, error=outcome.error, session_id=outcome.session_id
            )
        except anyio.get_cancelled_exc_class():
            await self._record_failure(job, run_id, "interrupted: the daemon stopped")
            raise
        except Exception as exc:  # the store or the outbox failed: record what we can
            log.exception("cron.run_crashed", job=job.name)
            await self._record_failure(job, run_id, _one_line(exc))
        finally:
            self._running.discard(job.id)

    async def _record_failure(self, job: CronJob, run_id: int, error: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.jobs.finish(run_id, job, "failed", error=error)
            except Exception:
                log.exception("cron.record_failed", job=job.name)

    async def run_now(self, job: CronJob) -> RunOutcome:
        """`cron run NAME`: one run at once, recorded like any other."""
        moment = self.clock()
        run_id = await self.jobs.claim(job, moment)
        outcome = await self.runner.run(job)
        if run_id is not None:
            await self.jobs.finish(
                run_id, job, outcome.status, error=outcome.error, session_id=outcome.session_id
            )
        return outcome
