"""Upgrades: a store one migration behind is copied before the daemon migrates it (the copy
kept until the next start that goes well), `doctor` reports the pending migration without
applying it, and a store newer than the code is refused in one line, on SQLite and on
PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rousseau.agent import StoreError
from rousseau.state.migrations import MIGRATIONS, migrate
from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU
from tests.test_backup import cli
from tests.test_daemon import Daemon, model

NEWEST = MIGRATIONS[-1].version


@pytest.fixture
def llm(fake_llm: FakeLLMServer) -> FakeLLMServer:
    fake_llm.responder = model
    return fake_llm


def behind(db: Path) -> None:
    """A store made by the version before this one, with a conversation in it."""
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        migrate(conn, MIGRATIONS[:-1])
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s1', 'old', 1, 1)"
        )


def versions(db: Path) -> set[int]:
    with closing(sqlite3.connect(db)) as conn:
        return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def test_a_store_behind_is_copied_before_it_is_migrated(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    db = tmp_path / "state.db"
    behind(db)
    daemon = Daemon(tmp_path, telegram, llm)
    doctor = cli(daemon.config, "doctor")
    assert f"1 migration(s) pending (schema {NEWEST - 1} -> {NEWEST})" in doctor.stdout
    assert NEWEST not in versions(db)  # doctor changed nothing
    copy = tmp_path / f"state.db.before-v{NEWEST}.bak"
    assert not copy.exists()
    daemon.start()
    telegram.push("hello", chat_id=42, user_id=42)
    telegram.wait_sent(1)
    assert daemon.stop() == 0
    assert NEWEST in versions(db)
    assert versions(copy) == versions(db) - {NEWEST}  # the store as it was
    with closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT title FROM sessions").fetchall() == [("old",)]
    assert copy.stat().st_mode & 0o777 == 0o600
    daemon.start()  # the next start that goes well lets it go
    telegram.push("again", chat_id=42, user_id=42)
    telegram.wait_sent(2)
    assert daemon.stop() == 0
    assert not copy.exists()


def test_a_store_newer_than_the_code_is_refused_in_one_line(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    db = tmp_path / "state.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        migrate(conn)
        conn.execute("INSERT INTO schema_migrations VALUES (999, 'from the future', 0)")
    daemon = Daemon(tmp_path, telegram, llm)
    ran = subprocess.run(
        [*ROUSSEAU, "--config", str(daemon.config), "run"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = f"the store's schema is version 999, newer than this rousseau knows ({NEWEST})"
    assert ran.returncode != 0
    assert said in ran.stderr and "Traceback" not in ran.stderr
    assert [line for line in ran.stderr.splitlines() if said in line]
    doctor = cli(daemon.config, "doctor")
    assert doctor.returncode == 1 and said in doctor.stdout


@pytest.mark.anyio
async def test_postgresql_is_backed_up_before_a_migration_and_refused_when_newer(
    tmp_path: Path, postgres: Any
) -> None:
    import psycopg

    from rousseau.config import load_config
    from rousseau.state.backend import open_backend
    from rousseau.state.backup import verify
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_migrations import MIGRATIONS as PG

    url = postgres.new_database()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at DOUBLE PRECISION NOT NULL)"
        )
        for migration in PG[:-1]:  # the store as the version before this one left it
            for statement in migration.statements:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                (migration.version, migration.name),
            )
        await conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s1', 'old', 1, 1)"
        )
    folder = tmp_path / "backups"
    (tmp_path / "config.yaml").write_text(f"state:\n  url: {url}\nbackup:\n  dir: {folder}\n")
    config = load_config(str(tmp_path / "config.yaml"), {"HOME": str(tmp_path)})
    backend = await open_backend(config)
    await backend.aclose()
    [copy] = folder.glob(f"before-v{PG[-1].version}-*.tar")
    checked = verify(copy)
    assert checked.rows["sessions"] == 1 and checked.manifest.schema == PG[-1].version - 1
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    with pytest.raises(StoreError, match="schema is version 999, newer than this rousseau"):
        await PostgresStore.open(url)
