"""Cron jobs and runs in the SQLite store (the JobStore protocol).

As on PostgreSQL, the run row is the claim: UNIQUE (job, scheduled time) lets a scheduled
time run once, whichever daemon or restart gets there first. The values come checked: cron/
reads schedules and targets, this module only keeps them.
"""

from __future__ import annotations

import sqlite3
import time

from rousseau.state.records import (
    JOB_COLUMNS,
    RUN_COLUMNS,
    CronJob,
    CronRun,
    Misfire,
    RunStatus,
    job_of,
    run_of,
)
from rousseau.state.store import Store


def _find(db: sqlite3.Connection, key: str) -> CronJob | None:
    column, value = ("id", int(key)) if key.isdigit() else ("name", key)
    found = db.execute(f"SELECT {JOB_COLUMNS} FROM cron_jobs WHERE {column} = ?", (value,))
    row = found.fetchone()
    return job_of(row) if row else None


class SqliteCronJobs:
    """Jobs and runs in a Store, through its worker like the rest of its state."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- jobs -----------------------------------------------------------------------------

    async def add(
        self,
        *,
        name: str,
        schedule: str,
        timezone: str,
        prompt: str,
        deliver_to: str,
        enabled: bool,
        misfire: Misfire,
        agent: str,
        now: float,
        next_run_at: float | None,
    ) -> CronJob | None:
        def op(db: sqlite3.Connection) -> CronJob | None:
            try:
                cur = db.execute(
                    "INSERT INTO cron_jobs (name, schedule, timezone, prompt, deliver_to, enabled,"
                    " misfire, created_at, updated_at, next_run_at, agent)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        schedule,
                        timezone,
                        prompt,
                        deliver_to,
                        int(enabled),
                        misfire,
                        now,
                        now,
                        next_run_at,
                        agent,
                    ),
                )
            except sqlite3.IntegrityError:
                return None
            row = db.execute(f"SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id = ?", (cur.lastrowid,))
            return job_of(row.fetchone())

        return await self.store.call(op, write=True)

    async def all(self) -> list[CronJob]:
        def op(db: sqlite3.Connection) -> list[CronJob]:
            rows = db.execute(f"SELECT {JOB_COLUMNS} FROM cron_jobs ORDER BY name")
            return [job_of(r) for r in rows]

        return await self.store.call(op)

    async def find(self, key: str) -> CronJob | None:
        return await self.store.call(lambda db: _find(db, key))

    async def remove(self, key: str) -> CronJob | None:
        def op(db: sqlite3.Connection) -> CronJob | None:
            job = _find(db, key)
            if job is not None:
                db.execute("DELETE FROM cron_jobs WHERE id = ?", (job.id,))
            return job

        return await self.store.call(op, write=True)

    async def set_enabled(
        self, job_id: int, enabled: bool, *, next_run_at: float | None, now: float
    ) -> CronJob | None:
        def op(db: sqlite3.Connection) -> CronJob | None:
            db.execute(
                "UPDATE cron_jobs SET enabled = ?, next_run_at = ?, updated_at = ? WHERE id = ?",
                (int(enabled), next_run_at, now, job_id),
            )
            return _find(db, str(job_id))

        return await self.store.call(op, write=True)

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

    async def runs(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]:
        def op(db: sqlite3.Connection) -> list[CronRun]:
            where, args = ("WHERE job_id = ?", (job_id, limit)) if job_id else ("", (limit,))
            rows = db.execute(
                f"SELECT {RUN_COLUMNS} FROM cron_runs {where}"
                " ORDER BY scheduled_at DESC, id DESC LIMIT ?",
                args,
            )
            return [run_of(r) for r in rows]

        return await self.store.call(op)
