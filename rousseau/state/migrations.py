"""Schema migrations, applied in order and recorded in `schema_migrations`.

Append new migrations; never edit one that has shipped. A migration is SQL statements and,
after them, optionally a step in Python on the same connection and transaction: where
sqlite-utils does the work (its import, 0.15 s, is paid only by a store that migrates).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from rousseau.agent.errors import StoreError

log = structlog.get_logger("rousseau.store")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    then: Callable[[sqlite3.Connection], None] | None = None


def _recall_index(conn: sqlite3.Connection) -> None:
    """The full-text index over messages and the triggers that keep it in step, as
    sqlite-utils makes them (they replace the hand-written ones of migration 6); then
    filled from the messages."""
    import sqlite_utils

    messages = sqlite_utils.Database(conn).table("messages")
    messages.enable_fts(
        ["text"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2", create_triggers=True
    )
    messages.rebuild_fts()


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions and messages",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                title TEXT NOT NULL DEFAULT '',
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                message_count INTEGER NOT NULL DEFAULT 0,
                summary TEXT
            )""",
            "CREATE INDEX sessions_updated ON sessions(updated_at DESC)",
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
                content TEXT NOT NULL,
                text TEXT NOT NULL DEFAULT '',
                compacted INTEGER NOT NULL DEFAULT 0,
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX messages_session ON messages(session_id, id)",
        ),
    ),
    Migration(
        2,
        "token usage per session, provider-side session ids",
        (
            "ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
            """CREATE TABLE external_sessions (
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                provider TEXT NOT NULL,
                external_id TEXT NOT NULL,
                PRIMARY KEY (session_id, provider)
            )""",
        ),
    ),
    Migration(
        3,
        "daemon: inbox, outbox, chat-to-session map, pairing",
        (
            """CREATE TABLE inbox (
                transport TEXT NOT NULL,
                message_id TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                thread_id TEXT,
                text TEXT NOT NULL,
                is_group INTEGER NOT NULL DEFAULT 0,
                mentioned INTEGER NOT NULL DEFAULT 0,
                at REAL NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'ignored')),
                appended INTEGER NOT NULL DEFAULT 0,
                received_at REAL NOT NULL,
                PRIMARY KEY (transport, message_id)
            )""",
            "CREATE INDEX inbox_pending ON inbox(received_at) WHERE status = 'pending'",
            """CREATE TABLE outbox (
                id INTEGER PRIMARY KEY,
                transport TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                thread_id TEXT,
                reply_to TEXT,
                text TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at REAL NOT NULL,
                last_error TEXT,
                created_at REAL NOT NULL,
                sent_at REAL
            )""",
            "CREATE INDEX outbox_due ON outbox(transport, next_attempt_at)"
            " WHERE status = 'pending'",
            """CREATE TABLE chat_sessions (
                session_key TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE pairing_codes (
                code TEXT PRIMARY KEY,
                transport TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                created_at REAL NOT NULL,
                expires_at REAL NOT NULL
            )""",
            """CREATE TABLE allowed_senders (
                transport TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                approved_at REAL NOT NULL,
                PRIMARY KEY (transport, sender_id)
            )""",
        ),
    ),
    Migration(
        4,
        "small durable state per transport (login tokens, sync positions)",
        (
            """CREATE TABLE transport_state (
                transport TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                PRIMARY KEY (transport, key)
            )""",
        ),
    ),
    Migration(
        5,
        "cron jobs and runs",
        (
            """CREATE TABLE cron_jobs (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                schedule TEXT NOT NULL,
                timezone TEXT NOT NULL,
                prompt TEXT NOT NULL,
                deliver_to TEXT NOT NULL,
                enabled INTEGER NOT NULL DEFAULT 1,
                misfire TEXT NOT NULL DEFAULT 'run_once'
                    CHECK (misfire IN ('run_once', 'skip')),
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                last_run_at REAL,
                last_status TEXT,
                next_run_at REAL
            )""",
            """CREATE TABLE cron_runs (
                id INTEGER PRIMARY KEY,
                job_id INTEGER NOT NULL REFERENCES cron_jobs(id) ON DELETE CASCADE,
                scheduled_at REAL NOT NULL,
                started_at REAL,
                finished_at REAL,
                status TEXT NOT NULL
                    CHECK (status IN ('running', 'ok', 'failed', 'missed', 'skipped')),
                error TEXT,
                session_id TEXT,
                UNIQUE (job_id, scheduled_at)
            )""",
            "CREATE INDEX cron_runs_job ON cron_runs(job_id, scheduled_at DESC)",
        ),
    ),
    Migration(
        6,
        "full-text index over messages, session owners for scoped recall",
        (
            "ALTER TABLE sessions ADD COLUMN owner TEXT",  # transport:sender; NULL = local user
            "ALTER TABLE sessions ADD COLUMN chat TEXT",  # transport:chat_id
            "CREATE INDEX sessions_owner ON sessions(owner)",
            "CREATE INDEX sessions_chat ON sessions(chat)",
            """CREATE VIRTUAL TABLE messages_fts USING fts5(
                text, content='messages', content_rowid='id',
                tokenize='unicode61 remove_diacritics 2'
            )""",
            """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
                WHEN new.text != '' BEGIN
                INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
            END""",
            """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
                WHEN old.text != '' BEGIN
                INSERT INTO messages_fts (messages_fts, rowid, text)
                VALUES ('delete', old.id, old.text);
            END""",
            """CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
                INSERT INTO messages_fts (messages_fts, rowid, text)
                SELECT 'delete', old.id, old.text WHERE old.text != '';
                INSERT INTO messages_fts (rowid, text) SELECT new.id, new.text
                WHERE new.text != '';
            END""",
            "INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')",
        ),
    ),
    Migration(
        7,
        "audit trail of tool calls",
        (
            """CREATE TABLE tool_calls (
                id INTEGER PRIMARY KEY,
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                decision TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'invalid')),
                decided_by TEXT NOT NULL DEFAULT '',
                reason TEXT NOT NULL DEFAULT '',
                started_at REAL NOT NULL,
                duration REAL NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error', 'denied'))
            )""",
            "CREATE INDEX tool_calls_at ON tool_calls(started_at DESC)",
            "CREATE INDEX tool_calls_session ON tool_calls(session_id, started_at)",
        ),
    ),
    Migration(
        8,
        "answer buttons on outgoing messages",
        ("ALTER TABLE outbox ADD COLUMN buttons TEXT",),  # a JSON list of labels, or NULL
    ),
    Migration(
        9,
        "inbox: failed messages with their error; indexes for the retention sweep",
        (
            # SQLite cannot widen a CHECK in place: the table is rebuilt.
            """CREATE TABLE inbox_new (
                transport TEXT NOT NULL,
                message_id TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                thread_id TEXT,
                text TEXT NOT NULL,
                is_group INTEGER NOT NULL DEFAULT 0,
                mentioned INTEGER NOT NULL DEFAULT 0,
                at REAL NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'ignored', 'failed')),
                appended INTEGER NOT NULL DEFAULT 0,
                received_at REAL NOT NULL,
                error TEXT,
                PRIMARY KEY (transport, message_id)
            )""",
            "INSERT INTO inbox_new (transport, message_id, chat_id, sender_id, thread_id, text,"
            " is_group, mentioned, at, status, appended, received_at) SELECT transport,"
            " message_id, chat_id, sender_id, thread_id, text, is_group, mentioned, at, status,"
            " appended, received_at FROM inbox",
            "DROP TABLE inbox",
            "ALTER TABLE inbox_new RENAME TO inbox",
            "CREATE INDEX inbox_pending ON inbox(received_at) WHERE status = 'pending'",
            "CREATE INDEX inbox_received ON inbox(received_at)",
            "CREATE INDEX outbox_finished ON outbox(created_at) WHERE status != 'pending'",
            "CREATE INDEX cron_runs_at ON cron_runs(scheduled_at)",
        ),
    ),
    Migration(
        10,
        "audit: calls cut short (a stopped turn) are recorded as cancelled",
        (
            """CREATE TABLE tool_calls_new (
                id INTEGER PRIMARY KEY,
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                decision TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'invalid')),
                decided_by TEXT NOT NULL DEFAULT '',
                reason TEXT NOT NULL DEFAULT '',
                started_at REAL NOT NULL,
                duration REAL NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error', 'denied', 'cancelled'))
            )""",
            "INSERT INTO tool_calls_new SELECT * FROM tool_calls",
            "DROP TABLE tool_calls",
            "ALTER TABLE tool_calls_new RENAME TO tool_calls",
            "CREATE INDEX tool_calls_at ON tool_calls(started_at DESC)",
            "CREATE INDEX tool_calls_session ON tool_calls(session_id, started_at)",
        ),
    ),
    Migration(
        11,
        "an index for the sweep of messages a summary replaced",
        ("CREATE INDEX messages_compacted ON messages(created_at) WHERE compacted = 1",),
    ),
    Migration(
        12,
        "inbox: the files a message carried, and the refusal its sender was given",
        (
            "ALTER TABLE inbox ADD COLUMN attachments TEXT",  # a JSON list, or NULL
            "ALTER TABLE inbox ADD COLUMN refusal TEXT NOT NULL DEFAULT ''",
        ),
    ),
    Migration(
        13,
        "outbox: a file to send, its text the caption",
        ("ALTER TABLE outbox ADD COLUMN attachment TEXT",),  # a JSON list of one, or NULL
    ),
    Migration(
        14,
        "an index of the messages that carry files, for the sweep of unused blobs",
        ("CREATE INDEX messages_media ON messages(id) WHERE instr(content, '\"sha256\"') > 0",),
    ),
    Migration(
        15,
        "inbox: the files a message's turn sent, kept until its answer is queued",
        ("ALTER TABLE inbox ADD COLUMN files_out TEXT",),  # a JSON list, or NULL
    ),
    Migration(
        16,
        "replies streamed into the chat: the preview's messages, and the part that replaces one",
        (
            "ALTER TABLE inbox ADD COLUMN preview TEXT",  # a JSON list of message ids, or NULL
            "ALTER TABLE outbox ADD COLUMN replaces TEXT",
        ),
    ),
    Migration(
        17,
        "sessions: the agent each belongs to (recall searches only its agent's sessions)",
        ("ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'default'",),
    ),
    Migration(
        18,
        "cron jobs: the agent each runs on",
        ("ALTER TABLE cron_jobs ADD COLUMN agent TEXT NOT NULL DEFAULT 'default'",),
    ),
    Migration(
        19,
        "the recall index and its triggers made by sqlite-utils",
        (
            "DROP TRIGGER messages_fts_insert",
            "DROP TRIGGER messages_fts_delete",
            "DROP TRIGGER messages_fts_update",
            "DROP TABLE messages_fts",
        ),
        then=_recall_index,
    ),
    Migration(
        20,
        "people's profiles: what each agent keeps about each person it talks to",
        (
            """CREATE TABLE profile_entries (
                id INTEGER PRIMARY KEY,
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                text TEXT NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            )""",
            "CREATE INDEX profile_entries_of ON profile_entries(agent, person, id)",
        ),
    ),
    Migration(
        21,
        "embeddings: which model the message vectors are of, and how far they reach",
        (
            """CREATE TABLE vector_state (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                model TEXT NOT NULL,
                dimensions INTEGER NOT NULL,
                cursor INTEGER NOT NULL
            )""",
            """CREATE TABLE message_vectors (
                id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
                vector BLOB NOT NULL
            )""",
        ),
    ),
    Migration(
        22,
        "spending: what each model call cost, and each agent's and person's day",
        (
            """CREATE TABLE model_calls (
                id INTEGER PRIMARY KEY,
                at REAL NOT NULL,
                day TEXT NOT NULL,
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                session_id TEXT NOT NULL,
                job TEXT NOT NULL,
                model TEXT NOT NULL,
                input_tokens INTEGER NOT NULL,
                output_tokens INTEGER NOT NULL,
                cache_read_tokens INTEGER NOT NULL,
                cache_write_tokens INTEGER NOT NULL,
                usd REAL NOT NULL
            )""",
            "CREATE INDEX model_calls_session ON model_calls (session_id)",
            "CREATE INDEX model_calls_day ON model_calls (day)",
            """CREATE TABLE spending_days (
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                day TEXT NOT NULL,
                calls INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                usd REAL NOT NULL,
                PRIMARY KEY (agent, person, day)
            )""",
        ),
    ),
    Migration(
        23,
        "sub-agents' sessions: the session that delegated each",
        (
            "ALTER TABLE sessions ADD COLUMN parent TEXT",
            "CREATE INDEX sessions_parent ON sessions (parent)",
        ),
    ),
)


def migrate(
    conn: sqlite3.Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    *,
    before: Callable[[sqlite3.Connection, int], None] | None = None,
) -> list[int]:
    """Apply every pending migration, each in its own transaction; return those applied.
    A store whose schema is newer than these migrations is refused (StoreError); `before`
    is called (with the newest version to come) before a store holding data is changed."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at REAL NOT NULL
        )"""
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    check_not_newer(done, migrations)
    pending = [m.version for m in migrations if m.version not in done]
    if done and pending and before is not None:
        before(conn, max(pending))
    applied: list[int] = []
    for migration in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
            ).fetchone()
            if done is None:
                for statement in migration.statements:
                    conn.execute(statement)
                if migration.then is not None:
                    migration.then(conn)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
                applied.append(migration.version)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return applied


def check_not_newer(done: set[int], migrations: tuple[Any, ...]) -> None:
    """StoreError if the store has migrations this code does not know (a newer rousseau
    made it): running on it could lose what the newer schema keeps."""
    known = max((m.version for m in migrations), default=0)
    newest = max(done, default=0)
    if newest > known:
        raise StoreError(
            f"the store's schema is version {newest}, newer than this rousseau knows ({known}):"
            " upgrade rousseau, or restore a backup made with this version"
        )


async def pending_in(config: Any) -> tuple[int, list[int]]:
    """The store's schema version and the migrations this code would apply to it, read
    without changing it (0 and none for a store not made yet); StoreError if it is newer
    than this code or cannot be read."""
    if config.state.url is not None:
        return await _pending_postgres(config.state.url.get_secret_value())
    return _pending_sqlite(config.state.path)


def _pending_sqlite(path: str) -> tuple[int, list[int]]:
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        return 0, []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the store at {path}: {exc}") from exc
    check_not_newer(done, MIGRATIONS)
    return max(done, default=0), [m.version for m in MIGRATIONS if m.version not in done]


async def _pending_postgres(url: str) -> tuple[int, list[int]]:
    import psycopg

    from rousseau.state.postgres_migrations import MIGRATIONS as PG

    try:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cursor = await conn.execute("SELECT version FROM schema_migrations")
            done = {int(row[0]) for row in await cursor.fetchall()}
    except psycopg.errors.UndefinedTable:
        return 0, []
    except psycopg.Error as exc:
        raise StoreError(f"cannot read the PostgreSQL store: {exc}") from exc
    check_not_newer(done, PG)
    return max(done, default=0), [m.version for m in PG if m.version not in done]


def copy_before(path: str) -> Callable[[sqlite3.Connection, int], None]:
    """What keeps a copy of the store at `path` before migrating it to a version:
    `PATH.before-vN.bak` (0600), removed by the next successful start."""

    def keep(conn: sqlite3.Connection, version: int) -> None:
        target = f"{path}.before-v{version}.bak"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        with contextlib.closing(sqlite3.connect(target)) as copy:
            conn.backup(copy)
        log.info("store.copied_before_migrating", path=target, version=version)

    return keep


def prune_copies(path: str, made_before: float) -> list[str]:
    """The copies kept before a migration that are older than `made_before` (this start's
    beginning: the start that migrated has run), deleted."""
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(path)))
    gone = []
    for entry in os.scandir(folder or "."):
        if entry.name.startswith(f"{name}.before-v") and entry.name.endswith(".bak"):
            if entry.stat().st_mtime < made_before:
                os.unlink(entry.path)
                gone.append(entry.path)
    return gone
