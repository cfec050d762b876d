"""The PostgreSQL store's schema migrations, applied in order by PostgresStore.open under an
advisory lock (daemons starting at once migrate once) and recorded in `schema_migrations`.

Append new migrations; never edit one that has shipped. They follow SQLite's
(state/migrations.py) in what they make, in PostgreSQL's types.
"""

from __future__ import annotations

from rousseau.state.migrations import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, messages, provider-side session ids, audit trail, recall index",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                title TEXT NOT NULL DEFAULT '',
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                message_count INTEGER NOT NULL DEFAULT 0,
                summary TEXT,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                cache_read_tokens BIGINT NOT NULL DEFAULT 0,
                cache_write_tokens BIGINT NOT NULL DEFAULT 0,
                owner TEXT,
                chat TEXT,
                agent TEXT NOT NULL DEFAULT 'default'
            )""",
            "CREATE INDEX sessions_updated ON sessions (updated_at DESC)",
            "CREATE INDEX sessions_owner ON sessions (owner)",
            "CREATE INDEX sessions_chat ON sessions (chat)",
            """CREATE TABLE messages (
                id BIGSERIAL PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
                content TEXT NOT NULL,
                text TEXT NOT NULL DEFAULT '',
                words TSVECTOR NOT NULL,
                compacted BOOLEAN NOT NULL DEFAULT FALSE,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX messages_session ON messages (session_id, id)",
            "CREATE INDEX messages_words ON messages USING GIN (words)",
            """CREATE TABLE external_sessions (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                provider TEXT NOT NULL,
                external_id TEXT NOT NULL,
                PRIMARY KEY (session_id, provider)
            )""",
            """CREATE TABLE tool_calls (
                id BIGSERIAL PRIMARY KEY,
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                decision TEXT NOT NULL,
                decided_by TEXT NOT NULL,
                reason TEXT NOT NULL,
                started_at DOUBLE PRECISION NOT NULL,
                duration DOUBLE PRECISION NOT NULL,
                outcome TEXT NOT NULL
            )""",
            "CREATE INDEX tool_calls_at ON tool_calls (started_at DESC)",
            "CREATE INDEX tool_calls_session ON tool_calls (session_id, started_at)",
        ),
    ),
    Migration(
        2,
        "daemons and their claims: inbox, outbox, chat-to-session map",
        (
            """CREATE TABLE daemons (
                id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                started_at DOUBLE PRECISION NOT NULL,
                beat_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE inbox (
                transport TEXT NOT NULL,
                message_id TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                thread_id TEXT,
                text TEXT NOT NULL,
                is_group BOOLEAN NOT NULL DEFAULT FALSE,
                mentioned BOOLEAN NOT NULL DEFAULT FALSE,
                at DOUBLE PRECISION NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'ignored', 'failed')),
                appended BIGINT NOT NULL DEFAULT 0,
                received_at DOUBLE PRECISION NOT NULL,
                error TEXT,
                attachments TEXT,
                refusal TEXT NOT NULL DEFAULT '',
                files_out JSONB,
                preview TEXT,
                claimed_by TEXT,
                PRIMARY KEY (transport, message_id)
            )""",
            "CREATE INDEX inbox_pending ON inbox (received_at) WHERE status = 'pending'",
            "CREATE INDEX inbox_received ON inbox (received_at)",
            """CREATE TABLE outbox (
                id BIGSERIAL PRIMARY KEY,
                transport TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                thread_id TEXT,
                reply_to TEXT,
                text TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at DOUBLE PRECISION NOT NULL,
                last_error TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                sent_at DOUBLE PRECISION,
                buttons TEXT,
                attachment TEXT,
                replaces TEXT,
                claimed_by TEXT
            )""",
            "CREATE INDEX outbox_due ON outbox (transport, next_attempt_at)"
            " WHERE status = 'pending'",
            "CREATE INDEX outbox_finished ON outbox (created_at) WHERE status != 'pending'",
            """CREATE TABLE chat_sessions (
                session_key TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL
            )""",
        ),
    ),
    Migration(
        3,
        "transport state, pairing, cron jobs and runs",
        (
            """CREATE TABLE transport_state (
                transport TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                PRIMARY KEY (transport, key)
            )""",
            """CREATE TABLE pairing_codes (
                code TEXT PRIMARY KEY,
                transport TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                seq BIGSERIAL
            )""",
            """CREATE TABLE allowed_senders (
                transport TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                approved_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (transport, sender_id)
            )""",
            """CREATE TABLE cron_jobs (
                id BIGSERIAL PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                schedule TEXT NOT NULL,
                timezone TEXT NOT NULL,
                prompt TEXT NOT NULL,
                deliver_to TEXT NOT NULL,
                enabled BOOLEAN NOT NULL DEFAULT TRUE,
                misfire TEXT NOT NULL DEFAULT 'run_once' CHECK (misfire IN ('run_once', 'skip')),
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                last_run_at DOUBLE PRECISION,
                last_status TEXT,
                next_run_at DOUBLE PRECISION,
                agent TEXT NOT NULL DEFAULT 'default'
            )""",
            """CREATE TABLE cron_runs (
                id BIGSERIAL PRIMARY KEY,
                job_id BIGINT NOT NULL REFERENCES cron_jobs (id) ON DELETE CASCADE,
                scheduled_at DOUBLE PRECISION NOT NULL,
                started_at DOUBLE PRECISION,
                finished_at DOUBLE PRECISION,
                status TEXT NOT NULL
                    CHECK (status IN ('running', 'ok', 'failed', 'missed', 'skipped')),
                error TEXT,
                session_id TEXT,
                UNIQUE (job_id, scheduled_at)
            )""",
            "CREATE INDEX cron_runs_at ON cron_runs (scheduled_at)",
        ),
    ),
    Migration(
        4,
        "sessions claimed by the daemon running their turn",
        (
            """CREATE TABLE session_claims (
                session_key TEXT PRIMARY KEY,
                daemon TEXT NOT NULL,
                since DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE pollers (
                transport TEXT PRIMARY KEY,
                daemon TEXT NOT NULL,
                since DOUBLE PRECISION NOT NULL
            )""",
        ),
    ),
    Migration(
        5,
        "tool approvals waiting, answered on any daemon",
        (
            """CREATE TABLE approvals (
                code TEXT PRIMARY KEY,
                daemon TEXT NOT NULL,
                owners TEXT NOT NULL,
                asked_at DOUBLE PRECISION NOT NULL,
                allow BOOLEAN,
                answered_by TEXT
            )""",
        ),
    ),
    Migration(
        6,
        "people's profiles: what each agent keeps about each person it talks to",
        (
            """CREATE TABLE profile_entries (
                id BIGSERIAL PRIMARY KEY,
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                text TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX profile_entries_of ON profile_entries (agent, person, id)",
        ),
    ),
    Migration(
        7,
        "embeddings: which model the message vectors are of, and how far they reach",
        (
            """CREATE TABLE vector_state (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                model TEXT NOT NULL,
                dimensions INTEGER NOT NULL,
                cursor BIGINT NOT NULL
            )""",
        ),
    ),
    Migration(
        8,
        "spending: what each model call cost, and each agent's and person's day",
        (
            """CREATE TABLE model_calls (
                id BIGSERIAL PRIMARY KEY,
                at DOUBLE PRECISION NOT NULL,
                day TEXT NOT NULL,
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                session_id TEXT NOT NULL,
                job TEXT NOT NULL,
                model TEXT NOT NULL,
                input_tokens BIGINT NOT NULL,
                output_tokens BIGINT NOT NULL,
                cache_read_tokens BIGINT NOT NULL,
                cache_write_tokens BIGINT NOT NULL,
                usd DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX model_calls_session ON model_calls (session_id)",
            "CREATE INDEX model_calls_day ON model_calls (day)",
            """CREATE TABLE spending_days (
                agent TEXT NOT NULL,
                person TEXT NOT NULL,
                day TEXT NOT NULL,
                calls BIGINT NOT NULL,
                tokens BIGINT NOT NULL,
                usd DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (agent, person, day)
            )""",
        ),
    ),
    Migration(
        9,
        "sub-agents' sessions: the session that delegated each",
        (
            "ALTER TABLE sessions ADD COLUMN parent TEXT",
            "CREATE INDEX sessions_parent ON sessions (parent)",
        ),
    ),
    Migration(
        10,
        "daemons: the config each one runs (its digest, for status)",
        ("ALTER TABLE daemons ADD COLUMN config TEXT NOT NULL DEFAULT ''",),
    ),
)
