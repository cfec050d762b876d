"""Cron jobs as the CLI, the web dashboard and the cron tool change them: each name,
schedule and target is checked here, its first time worked out, before the store keeps it.

The jobs, their runs and every statement on them are the store's (state/sqlite_cron.py,
state/postgres_cron.py, behind state.protocol.JobStore); the scheduler reads and claims
through that protocol directly.
"""

from __future__ import annotations

import time

from rousseau.agent import RousseauError
from rousseau.cron.schedule import Schedule, ScheduleError, parse_schedule
from rousseau.cron.targets import TargetError, parse_target
from rousseau.messages import DEFAULT_AGENT
from rousseau.state.protocol import JobStore
from rousseau.state.records import CronJob, Misfire

LIST_HINT = " (see: rousseau cron list)"
RESERVED = "heartbeat:"
"""The names of the jobs made from agent.heartbeat (cron/heartbeat.py): no one else's."""
"""Said after a job not found where a user named it to change it."""


class CronError(RousseauError):
    """A job that cannot be saved or found; the message is one line for the user."""


def schedule_of(job: CronJob) -> Schedule:
    """The job's schedule, read in its zone and anchored at its creation (for @every)."""
    return parse_schedule(job.schedule, job.timezone, anchor=job.created_at)


def target_of(job: CronJob) -> tuple[str, str]:
    """Where the job's replies go: (transport, recipient)."""
    return parse_target(job.deliver_to)


def validate(schedule: str, deliver_to: str, timezone: str, now: float) -> float | None:
    """Check a schedule and a target; return the first fire time. Raises CronError."""
    try:
        parse_target(deliver_to)
        return parse_schedule(schedule, timezone, anchor=now).next_after(now)
    except (ScheduleError, TargetError) as exc:
        raise CronError(str(exc)) from None


def checked(
    name: str, schedule: str, prompt: str, deliver_to: str, timezone: str, now: float
) -> float | None:
    """Check a new job; return its first fire time. Raises CronError."""
    if not name.strip() or name.strip().isdigit():
        raise CronError(f"bad job name {name!r}: a name needs a letter")
    if name.strip().startswith(RESERVED):
        raise CronError(f"bad job name {name!r}: {RESERVED}… names are agent.heartbeat's")
    if not prompt.strip():
        raise CronError("the prompt is empty")
    return validate(schedule, deliver_to, timezone, now)


class CronJobs:
    """The jobs of a JobStore, changed only with checked values; what cannot be done is a
    CronError whose message is one line for the user."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    async def add(
        self,
        name: str,
        schedule: str,
        prompt: str,
        deliver_to: str,
        *,
        timezone: str = "local",
        misfire: Misfire = "run_once",
        enabled: bool = True,
        now: float | None = None,
        agent: str = DEFAULT_AGENT,
        heartbeat: bool = False,
    ) -> CronJob:
        """A new job (`heartbeat`: the one of an agent's heartbeat, by its reserved name)."""
        moment = time.time() if now is None else now
        if heartbeat:
            first = validate(schedule, deliver_to, timezone, moment)
        else:
            first = checked(name, schedule, prompt, deliver_to, timezone, moment)
        job = await self.store.add(
            name=name.strip(),
            schedule=schedule,
            timezone=timezone,
            prompt=prompt,
            deliver_to=deliver_to,
            enabled=enabled,
            misfire=misfire,
            agent=agent,
            now=moment,
            next_run_at=first,
        )
        if job is None:
            raise CronError(f"a job named {name.strip()!r} exists already")
        return job

    async def all(self) -> list[CronJob]:
        return await self.store.all()

    async def get(self, key: str) -> CronJob:
        """A job by name or id; raises CronError if there is none."""
        job = await self.store.find(key)
        if job is None:
            raise CronError(f"no job named {key!r}")
        return job

    async def remove(self, key: str) -> CronJob:
        job = await self.store.remove(key)
        if job is None:
            raise CronError(f"no job named {key!r}{LIST_HINT}")
        return job

    async def set_enabled(self, key: str, enabled: bool, now: float | None = None) -> CronJob:
        """Enable or disable a job; an enabled job's next run counts from now (no catch-up)."""
        moment = time.time() if now is None else now
        job = await self.store.find(key)
        if job is not None:
            following = schedule_of(job).next_after(moment) if enabled else job.next_run_at
            job = await self.store.set_enabled(job.id, enabled, next_run_at=following, now=moment)
        if job is None:
            raise CronError(f"no job named {key!r}{LIST_HINT}")
        return job
