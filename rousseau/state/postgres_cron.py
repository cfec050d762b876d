"""Cron jobs and runs on PostgreSQL: what the scheduler and the cron tool ask of CronJobs.

As in SQLite, the run row is the claim: UNIQUE (job, scheduled time) lets one daemon of the
cluster run a scheduled time, whichever gets there first.
"""

from __future__ import annotations

import time
from typing import Any

from rousseau.cron.jobs import (
    _COLUMNS,
    CronError,
    CronJob,
    CronRun,
    Misfire,
    RunStatus,
    checked,
)
from rousseau.cron.jobs import _job as job_of
from rousseau.messages import DEFAULT_AGENT
from rousseau.state.postgres import PostgresStore


class PostgresCronJobs:
    """The async half of CronJobs (the daemon's: its scheduler and cron tool) on a
    PostgresStore."""

    def __init__(self, store: PostgresStore) -> None:
        self.pg = store

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
        import psycopg

        moment = time.time() if now is None else now
        first = checked(name, schedule, prompt, deliver_to, timezone, moment)
        try:
            async with self.pg.transaction() as db:
                cursor = await db.execute(
                    "INSERT INTO cron_jobs (name, schedule, timezone, prompt, deliver_to,"
                    " enabled, misfire, created_at, updated_at, next_run_at, agent)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    f" ON CONFLICT (name) DO NOTHING RETURNING {_COLUMNS}",
                    (
                        name.strip(),
                        schedule,
                        timezone,
                        prompt,
                        deliver_to,
                        enabled,
                        misfire,
                        moment,
                        moment,
                        first,
                        agent,
                    ),
                )
                row = await cursor.fetchone()
        except psycopg.Error as exc:  # pragma: no cover - the store turns these into StoreError
            raise CronError(str(exc)) from exc
        if row is None:
            raise CronError(f"a job named {name.strip()!r} exists already")
        return job_of(row)

    async def all(self) -> list[CronJob]:
        async with self.pg.transaction() as db:
            cursor = await db.execute(f"SELECT {_COLUMNS} FROM cron_jobs ORDER BY name")
            return [job_of(r) for r in await cursor.fetchall()]

    @staticmethod
    async def _find(db: Any, key: str) -> CronJob | None:
        column, value = ("id", int(key)) if key.isdigit() else ("name", key)
        cursor = await db.execute(f"SELECT {_COLUMNS} FROM cron_jobs WHERE {column} = %s", (value,))
        row = await cursor.fetchone()
        return job_of(row) if row else None

    async def get(self, key: str) -> CronJob:
        async with self.pg.transaction() as db:
            job = await self._find(db, key)
        if job is None:
            raise CronError(f"no job named {key!r}")
        return job

    async def remove(self, key: str) -> CronJob:
        async with self.pg.transaction() as db:
            job = await self._find(db, key)
            if job is None:
                raise CronError(f"no job named {key!r} (see: rousseau cron list)")
            await db.execute("DELETE FROM cron_jobs WHERE id = %s", (job.id,))
        return job

    async def set_enabled(self, key: str, enabled: bool, now: float | None = None) -> CronJob:
        """Enable or disable a job; an enabled job's next run counts from now."""
        moment = time.time() if now is None else now
        async with self.pg.transaction() as db:
            job = await self._find(db, key)
            if job is None:
                raise CronError(f"no job named {key!r} (see: rousseau cron list)")
            following = job.parsed().next_after(moment) if enabled else job.next_run_at
            cursor = await db.execute(
                "UPDATE cron_jobs SET enabled = %s, next_run_at = %s, updated_at = %s"
                f" WHERE id = %s RETURNING {_COLUMNS}",
                (enabled, following, moment, job.id),
            )
            row = await cursor.fetchone()
        assert row is not None
        return job_of(row)

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
                "SELECT id, job_id, scheduled_at, started_at, finished_at, status, error,"
                f" session_id FROM cron_runs {where} ORDER BY scheduled_at DESC, id DESC"
                " LIMIT %s",
                args,
            )
            rows = await cursor.fetchall()
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
