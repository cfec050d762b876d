"""Cron jobs and runs on PostgreSQL (the JobStore protocol).

As in SQLite, the run row is the claim: UNIQUE (job, scheduled time) lets one daemon of the
cluster run a scheduled time, whichever gets there first. The values come checked: cron/
reads schedules and targets, this module only keeps them.
"""

from __future__ import annotations

import time
from typing import Any

from rousseau.state.postgres import PostgresStore
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


async def _find(db: Any, key: str) -> CronJob | None:
    column, value = ("id", int(key)) if key.isdigit() else ("name", key)
    cursor = await db.execute(f"SELECT {JOB_COLUMNS} FROM cron_jobs WHERE {column} = %s", (value,))
    row = await cursor.fetchone()
    return job_of(row) if row else None


class PostgresCronJobs:
    """Jobs and runs on a PostgresStore, each call its own transaction."""

    def __init__(self, store: PostgresStore) -> None:
        self.pg = store

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
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                "INSERT INTO cron_jobs (name, schedule, timezone, prompt, deliver_to,"
                " enabled, misfire, created_at, updated_at, next_run_at, agent)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT (name) DO NOTHING RETURNING {JOB_COLUMNS}",
                (
                    name,
                    schedule,
                    timezone,
                    prompt,
                    deliver_to,
                    enabled,
                    misfire,
                    now,
                    now,
                    next_run_at,
                    agent,
                ),
            )
            row = await cursor.fetchone()
        return None if row is None else job_of(row)

    async def all(self) -> list[CronJob]:
        async with self.pg.transaction() as db:
            cursor = await db.execute(f"SELECT {JOB_COLUMNS} FROM cron_jobs ORDER BY name")
            return [job_of(r) for r in await cursor.fetchall()]

    async def find(self, key: str) -> CronJob | None:
        async with self.pg.transaction() as db:
            return await _find(db, key)

    async def remove(self, key: str) -> CronJob | None:
        async with self.pg.transaction() as db:
            job = await _find(db, key)
            if job is not None:
                await db.execute("DELETE FROM cron_jobs WHERE id = %s", (job.id,))
        return job

    async def set_enabled(
        self, job_id: int, enabled: bool, *, next_run_at: float | None, now: float
    ) -> CronJob | None:
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                "UPDATE cron_jobs SET enabled = %s, next_run_at = %s, updated_at = %s"
                f" WHERE id = %s RETURNING {JOB_COLUMNS}",
                (enabled, next_run_at, now, job_id),
            )
            row = await cursor.fetchone()
        return None if row is None else job_of(row)

    async def advance(self, job: CronJob, next_run_at: float | None) -> None:
        async with self.pg.transaction() as db:
            await db.execute(
                "UPDATE cron_jobs SET next_run_at = %s WHERE id = %s AND updated_at = %s",
                (next_run_at, job.id, job.updated_at),
            )

    async def claim(
        self, job: CronJob, scheduled_at: float, status: RunStatus = "running", error: str = ""
    ) -> int | None:
        now = time.time()
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                "INSERT INTO cron_runs (job_id, scheduled_at, started_at, finished_at, status,"
                " error) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING id",
                (
                    job.id,
                    scheduled_at,
                    now,
                    None if status == "running" else now,
                    status,
                    error or None,
                ),
            )
            row = await cursor.fetchone()
        return None if row is None else int(row[0])

    async def finish(
        self, run_id: int, job: CronJob, status: RunStatus, *, error: str = "", session_id: str = ""
    ) -> None:
        now = time.time()
        async with self.pg.transaction() as db:
            await db.execute(
                "UPDATE cron_runs SET status = %s, error = %s, session_id = %s, finished_at = %s"
                " WHERE id = %s",
                (status, error or None, session_id or None, now, run_id),
            )
            await db.execute(
                "UPDATE cron_jobs SET last_run_at = %s, last_status = %s WHERE id = %s",
                (now, status, job.id),
            )

    async def runs(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]:
        where, args = ("WHERE job_id = %s", (job_id, limit)) if job_id else ("", (limit,))
        async with self.pg.transaction() as db:
            cursor = await db.execute(
                f"SELECT {RUN_COLUMNS} FROM cron_runs {where}"
                " ORDER BY scheduled_at DESC, id DESC LIMIT %s",
                args,
            )
            rows = await cursor.fetchall()
        return [run_of(r) for r in rows]
