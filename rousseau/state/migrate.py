"""`rousseau migrate-state`: a SQLite store copied into an empty PostgreSQL one, then counted.

What is copied: sessions with their messages (attachments are references by content hash:
the media folder itself stays where `state.media_dir` says), provider-side session ids, the
chat-to-session map, admitted senders and transports' own state (login tokens, sync
positions), cron jobs and their runs, the audit trail, replies still waiting to be sent, and
what each agent keeps about each person (their profiles).
Ids are kept, so cron runs still point at their jobs and the order of messages is the same.
"""

from __future__ import annotations

import itertools
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from rousseau.agent import StoreError
from rousseau.state.postgres import PostgresStore
from rousseau.state.recall import words_of

if TYPE_CHECKING:
    from psycopg import AsyncConnection

TABLES: dict[str, str] = {
    "sessions": (
        "id, title, created_at, updated_at, message_count, summary, input_tokens,"
        " output_tokens, cache_read_tokens, cache_write_tokens, owner, chat, agent"
    ),
    "messages": "id, session_id, role, content, text, compacted, created_at",
    "external_sessions": "session_id, provider, external_id",
    "chat_sessions": "session_key, session_id, updated_at",
    "allowed_senders": "transport, sender_id, approved_at",
    "transport_state": "transport, key, value",
    "cron_jobs": (
        "id, name, schedule, timezone, prompt, deliver_to, enabled, misfire, created_at,"
        " updated_at, last_run_at, last_status, next_run_at, agent"
    ),
    "cron_runs": "id, job_id, scheduled_at, started_at, finished_at, status, error, session_id",
    "tool_calls": (
        "id, session_id, tool, input_digest, decision, decided_by, reason, started_at,"
        " duration, outcome"
    ),
    "outbox": (
        "id, transport, chat_id, thread_id, reply_to, text, status, attempts, next_attempt_at,"
        " last_error, created_at, sent_at, buttons, attachment, replaces"
    ),
    "profile_entries": "id, agent, person, text, created_at, updated_at",
}
"""Each table copied, with its columns (the same names on both sides)."""
_ONLY = {"outbox": "status = 'pending'"}
"""Rows copied (and counted) of a table not copied whole: replies sent stay behind."""

_BOOLEANS = {"messages": {"compacted"}, "cron_jobs": {"enabled"}}
_SERIAL = ("messages", "cron_jobs", "cron_runs", "tool_calls", "outbox", "profile_entries")
_BATCH = 1000


@dataclass
class Copied:
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per table: rows in the SQLite store, rows in PostgreSQL after the copy."""

    @property
    def matches(self) -> bool:
        return all(a == b for a, b in self.counts.values())


async def migrate_state(source: Path, target: PostgresStore) -> Copied:
    """Copy the SQLite store at `source` into `target` (which must hold no sessions and no
    cron jobs) in one transaction, then count both sides. StoreError if it cannot be done:
    nothing is half copied. The SQLite store must exist, its schema up to date."""
    # A command's one task: reading the file here blocks nothing else.
    with closing(sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True)) as db:
        waiting = db.execute("SELECT count(*) FROM inbox WHERE status = 'pending'").fetchone()[0]
        if waiting:
            raise StoreError(
                f"{waiting} message(s) in {source} are still to be answered: start the daemon"
                " on it once more and stop it (SIGTERM), then migrate"
            )
        async with target.transaction() as pg:
            cursor = await pg.execute(
                "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM cron_jobs)"
            )
            row = await cursor.fetchone()
            if row and row[0]:
                raise StoreError("the PostgreSQL store is not empty: migrate into a new database")
            for table, columns in TABLES.items():
                await _copy(db, pg, table, columns)
            for table in _SERIAL:
                await pg.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                    f" coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
                )
        copied = Copied()
        async with target.transaction() as pg:
            for table in TABLES:
                where = f" WHERE {_ONLY[table]}" if table in _ONLY else ""
                (mine,) = db.execute(f"SELECT count(*) FROM {table}{where}").fetchone()
                cursor = await pg.execute(f"SELECT count(*) FROM {table}{where}")
                theirs = await cursor.fetchone()
                copied.counts[table] = (int(mine), int(theirs[0]) if theirs else 0)
    return copied


async def _copy(db: sqlite3.Connection, pg: AsyncConnection[Any], table: str, columns: str) -> None:
    names = [c.strip() for c in columns.split(",")]
    booleans = _BOOLEANS.get(table, set())
    extra = ", words" if table == "messages" else ""
    values = ", ".join(["%s"] * len(names)) + (", to_tsvector('simple', %s)" if extra else "")
    insert = f"INSERT INTO {table} ({columns}{extra}) VALUES ({values})"
    rows = (
        sqlite_utils.Database(db)
        .table(table)
        .rows_where(_ONLY.get(table), select=columns, order_by="rowid")
    )
    while batch := list(itertools.islice(rows, _BATCH)):
        prepared = []
        for row in batch:
            fixed = [
                bool(row[name]) if name in booleans and row[name] is not None else row[name]
                for name in names
            ]
            if extra:
                fixed.append(" ".join(words_of(str(row["text"] or ""), recall=False)))
            prepared.append(fixed)
        async with pg.cursor() as cursor:
            await cursor.executemany(insert, prepared)
