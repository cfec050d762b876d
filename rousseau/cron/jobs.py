"""Cron jobs and their runs, kept in the store (the source of truth for the scheduler and
the CLI alike). A run row is the claim: UNIQUE(job, scheduled time) makes sure one scheduled
time runs once, whichever daemon or restart gets there first."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rousseau.agent import RousseauError
from rousseau.cron.schedule import Schedule, ScheduleError, parse_schedule
from rousseau.cron.targets import TargetError, parse_target
from rousseau.messages import DEFAULT_AGENT
from rousseau.state import Store

Misfire = Literal["run_once", "skip"]
RunStatus = Literal["running", "ok", "failed", "missed", "skipped"]
_COLUMNS = (
    "id, name, schedule, timezone, prompt, deliver_to, enabled, misfire, created_at,"
    " updated_at, last_run_at, last_status, next_run_at, agent"
)


class CronError(RousseauError):
    """A job that cannot be saved or found; the message is one line for the user."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CronJob:
    id: int
    name: str
    schedule: str
    timezone: str
    """The zone for a schedule without CRON_TZ (the config's cron.timezone when added)."""
    prompt: str
    deliver_to: str
    enabled: bool
    misfire: Misfire
    created_at: float
    updated_at: float
    last_run_at: float | None
    last_status: str | None
    next_run_at: float | None
    agent: str = DEFAULT_AGENT
    """The agent its turns run on."""

    def parsed(self) -> Schedule:
        return parse_schedule(self.schedule, self.timezone, anchor=self.created_at)

    @property
    def target(self) -> tuple[str, str]:
        return parse_target(self.deliver_to)


@dataclass(frozen=True, kw_only=True, slots=True)
class CronRun:
    id: int
    job_id: int
    scheduled_at: float
    started_at: float | None
    finished_at: float | None
    status: RunStatus
    error: str | None
    session_id: str | None


def _job(row: tuple[Any, ...]) -> CronJob:
    return CronJob(
        id=row[0],
        name=row[1],
        schedule=row[2],
        timezone=row[3],
        prompt=row[4],
        deliver_to=row[5],
        enabled=bool(row[6]),
        misfire=row[7],
        created_at=row[8],
        updated_at=row[9],
        last_run_at=row[10],
        last_status=row[11],
        next_run_at=row[12],
        agent=row[13],
    )


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
    if not prompt.strip():
        raise CronError("the prompt is empty")
    return validate(schedule, deliver_to, timezone, now)


class Jobs(Protocol):
    """What the scheduler and the cron tool ask of the jobs, whichever store keeps them
    (CronJobs for SQLite, state/postgres_cron.py for PostgreSQL)."""

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
    ) -> CronJob: ...

    async def all(self) -> list[CronJob]: ...

    async def get(self, key: str) -> CronJob: ...

    async def remove(self, key: str) -> CronJob: ...

    async def advance(self, job: CronJob, next_run_at: float | None) -> None: ...

    async def claim(
        self, job: CronJob, scheduled_at: float, status: RunStatus = "running", error: str = ""
    ) -> int | None: ...

    async def finish(
        self, run_id: int, job: CronJob, status: RunStatus, *, error: str = "", session_id: str = ""
    ) -> None: ...

    async def runs(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]: ...

    async def set_enabled(self, key: str, enabled: bool, now: float | None = None) -> CronJob: ...


class CronJobs:
    """Jobs and runs in a Store; every method has an async form and a `_sync` twin for the CLI."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- jobs -----------------------------------------------------------------------------

    @staticmethod
    def _add(
        name: str,
        schedule: str,
        prompt: str,
        deliver_to: str,
        timezone: str,
        misfire: Misfire,
        enabled: bool,
        now: float,
        agent: str,
    ) -> Any:
        first = checked(name, schedule, prompt, deliver_to, timezone, now)

        def op(db: sqlite3.Connection) -> CronJob:
            try:
                cur = db.execute(
                    "INSERT INTO cron_jobs (name, schedule, timezone, prompt, deliver_to, enabled,"
                    " misfire, created_at, updated_at, next_run_at, agent)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name.strip(),
                        schedule,
                        timezone,
                        prompt,
                        deliver_to,
                        int(enabled),
                        misfire,
                        now,
                        now,
                        first,
                        agent,
                    ),
                )
            except sqlite3.IntegrityError:
                raise CronError(f"a job named {name.strip()!r} exists already") from None
            row = db.execute(f"SELECT {_COLUMNS} FROM cron_jobs WHERE id = ?", (cur.lastrowid,))
            return _job(row.fetchone())

        return op

    def add_sync(
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
    ) -> CronJob:
        op = self._add(
            name,
            schedule,
            prompt,
            deliver_to,
            timezone,
            misfire,
            enabled,
            time.time() if now is None else now,
            agent,
        )
        job: CronJob = self.store.call_sync(op, write=True)
        return job

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
    ) -> CronJob:
        op = self._add(
            name,
            schedule,
            prompt,
            deliver_to,
            timezone,
            misfire,
            enabled,
            time.time() if now is None else now,
            agent,
        )
        job: CronJob = await self.store.call(op, write=True)
        return job

    @staticmethod
    def _list(db: sqlite3.Connection) -> list[CronJob]:
        return [_job(r) for r in db.execute(f"SELECT {_COLUMNS} FROM cron_jobs ORDER BY name")]

    def all_sync(self) -> list[CronJob]:
        return self.store.call_sync(self._list)

    async def all(self) -> list[CronJob]:
        return await self.store.call(self._list)

    @staticmethod
    def _find(db: sqlite3.Connection, key: str) -> CronJob | None:
        if key.isdigit():
            row = db.execute(f"SELECT {_COLUMNS} FROM cron_jobs WHERE id = ?", (int(key),))
        else:
            row = db.execute(f"SELECT {_COLUMNS} FROM cron_jobs WHERE name = ?", (key,))
        found = row.fetchone()
        return _job(found) if found else None

    def get_sync(self, key: str) -> CronJob:
        """A job by name or id; raises CronError if there is none."""
        job = self.store.call_sync(lambda db: self._find(db, key))
        if job is None:
            raise CronError(f"no job named {key!r} (see: rousseau cron list)")
        return job

    async def get(self, key: str) -> CronJob:
        job = await self.store.call(lambda db: self._find(db, key))
        if job is None:
            raise CronError(f"no job named {key!r}")
        return job

    def _remove(self, key: str) -> Any:
        def op(db: sqlite3.Connection) -> CronJob:
            job = self._find(db, key)
            if job is None:
                raise CronError(f"no job named {key!r} (see: rousseau cron list)")
            db.execute("DELETE FROM cron_jobs WHERE id = ?", (job.id,))
            return job

        return op

    def remove_sync(self, key: str) -> CronJob:
        job: CronJob = self.store.call_sync(self._remove(key), write=True)
        return job

    async def remove(self, key: str) -> CronJob:
        job: CronJob = await self.store.call(self._remove(key), write=True)
        return job

    def set_enabled_sync(self, key: str, enabled: bool, now: float | None = None) -> CronJob:
        """Enable or disable a job; an enabled job's next run counts from now (no catch-up)."""
        job: CronJob = self.store.call_sync(self._set_enabled(key, enabled, now), write=True)
        return job

    async def set_enabled(self, key: str, enabled: bool, now: float | None = None) -> CronJob:
        job: CronJob = await self.store.call(self._set_enabled(key, enabled, now), write=True)
        return job

    def _set_enabled(self, key: str, enabled: bool, now: float | None) -> Any:
        moment = time.time() if now is None else now

        def op(db: sqlite3.Connection) -> CronJob:
            job = self._find(db, key)
            if job is None:
                raise CronError(f"no job named {key!r} (see: rousseau cron list)")
            following = job.parsed().next_after(moment) if enabled else job.next_run_at
            db.execute(
                "UPDATE cron_jobs SET enabled = ?, next_run_at = ?, updated_at = ? WHERE id = ?",
                (int(enabled), following, moment, job.id),
            )
            found = self._find(db, str(job.id))
            assert found is not None
            return found

        return op

    async def advance(self, job: CronJob, next_run_at: float | None) -> None:
        """Move a job's next run on (unless someone changed the job meanwhile)."""

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE cron_jobs SET next_run_at = ? WHERE id = ? AND updated_at = ?",
                (next_run_at, job.id, job.updated_at),
            )

        await self.store.call(op, write=True)

    # -- runs -----------------------------------------------------------------------------

    async def claim(
        self, job: CronJob, scheduled_at: float, status: RunStatus = "running", error: str = ""
    ) -> int | None:
        """Record a run of `job` for `scheduled_at`; its id, or None if it was claimed before."""
        now = time.time()

        def op(db: sqlite3.Connection) -> int | None:
            cur = db.execute(
                "INSERT OR IGNORE INTO cron_runs (job_id, scheduled_at, started_at, finished_at,"
                " status, error) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    scheduled_at,
                    now,
                    None if status == "running" else now,
                    status,
                    error or None,
                ),
            )
            return cur.lastrowid if cur.rowcount == 1 else None

        return await self.store.call(op, write=True)

    async def finish(
        self, run_id: int, job: CronJob, status: RunStatus, *, error: str = "", session_id: str = ""
    ) -> None:
        now = time.time()

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE cron_runs SET status = ?, error = ?, session_id = ?, finished_at = ?"
                " WHERE id = ?",
                (status, error or None, session_id or None, now, run_id),
            )
            db.execute(
                "UPDATE cron_jobs SET last_run_at = ?, last_status = ? WHERE id = ?",
                (now, status, job.id),
            )

        await self.store.call(op, write=True)

    @staticmethod
    def _runs(job_id: int | None, limit: int) -> Any:
        def op(db: sqlite3.Connection) -> list[CronRun]:
            where, args = ("WHERE job_id = ?", (job_id, limit)) if job_id else ("", (limit,))
            rows = db.execute(
                "SELECT id, job_id, scheduled_at, started_at, finished_at, status, error,"
                f" session_id FROM cron_runs {where} ORDER BY scheduled_at DESC, id DESC LIMIT ?",
                args,
            )
            return [
                CronRun(
                    id=r[0],
                    job_id=r[1],
                    scheduled_at=r[2],
                    started_at=r[3],
                    finished_at=r[4],
                    status=r[5],
                    error=r[6],
                    session_id=r[7],
                )
                for r in rows
            ]

        return op

    async def runs(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]:
        runs: list[CronRun] = await self.store.call(self._runs(job_id, limit))
        return runs

    def runs_sync(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]:
        runs: list[CronRun] = self.store.call_sync(self._runs(job_id, limit))
        return runs
