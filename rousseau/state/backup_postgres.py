"""The PostgreSQL side of backups: a consistent snapshot of the tables, and a restore into
an empty database (see rousseau.state.backup)."""

from __future__ import annotations

import gzip
import tarfile
import time
from pathlib import Path
from typing import Any

from rousseau.state.backup import (
    SCHEMA,
    TRANSIENT,
    BackupError,
    Manifest,
    chunks,
)


async def snapshot(url: str, work: Path, manifest: Manifest) -> dict[str, Path]:
    """Every table (but the transient ones) copied out in one repeatable-read transaction:
    a consistent snapshot while daemons write."""
    import psycopg

    members: dict[str, Path] = {}
    try:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await conn.set_read_only(True)
            async with conn.transaction():
                cursor = await conn.execute(
                    "SELECT coalesce(max(version), 0) FROM schema_migrations"
                )
                row = await cursor.fetchone()
                manifest.schema = int(row[0]) if row else 0
                for table, columns in (await _pg_tables(conn)).items():
                    if table in TRANSIENT:
                        continue
                    path = work / f"{table}.copy.gz"
                    rows = 0
                    listed = ", ".join(f'"{c}"' for c in columns)
                    with gzip.open(path, "wb", compresslevel=6) as out:
                        async with conn.cursor().copy(
                            f'COPY (SELECT {listed} FROM "{table}") TO STDOUT'
                        ) as copy:
                            async for chunk in copy:
                                out.write(chunk)
                                rows += bytes(chunk).count(b"\n")
                    members[f"state/postgresql/{table}.copy.gz"] = path
                    manifest.columns[table] = columns
                    manifest.rows[table] = rows
    except psycopg.Error as exc:
        raise BackupError(f"state: cannot read the PostgreSQL store: {exc}") from exc
    return members


async def _pg_tables(conn: Any) -> dict[str, list[str]]:
    """The schema's tables and their columns (generated ones left out: they are made)."""
    cursor = await conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND is_generated = 'NEVER'"
        " AND table_name IN (SELECT table_name FROM information_schema.tables"
        "  WHERE table_schema = current_schema() AND table_type = 'BASE TABLE')"
        " ORDER BY table_name, ordinal_position"
    )
    tables: dict[str, list[str]] = {}
    for table, column in await cursor.fetchall():
        tables.setdefault(str(table), []).append(str(column))
    return tables


async def restore_into(tar: tarfile.TarFile, manifest: Manifest, url: str, _: Path) -> None:
    import psycopg

    from rousseau.state.postgres import PostgresStore

    store = await PostgresStore.open(url)  # the schema made (or brought up to date)
    await store.aclose()
    try:
        async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
            cursor = await conn.execute(SCHEMA)
            row = await cursor.fetchone()
            if row is None or int(row[0]) != manifest.schema:
                raise BackupError(
                    f"the backup's schema is version {manifest.schema}, this version's is "
                    f"{row[0] if row else 0}: restore it with the version that made it"
                )
            cursor = await conn.execute(
                "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM cron_jobs)"
            )
            row = await cursor.fetchone()
            if row and row[0]:
                raise BackupError("the database is not empty: restore into a new database")
            present = await _pg_tables(conn)
            for table in await _pg_order(conn, list(manifest.columns)):
                if table not in present:
                    raise BackupError(f"state/postgresql/{table}.copy.gz: no such table here")
                source = tar.extractfile(f"state/postgresql/{table}.copy.gz")
                if source is None:
                    raise BackupError(f"state/postgresql/{table}.copy.gz: missing")
                await conn.execute(f'DELETE FROM "{table}"')  # what the schema made itself
                listed = ", ".join(f'"{c}"' for c in manifest.columns[table])
                async with conn.cursor().copy(f'COPY "{table}" ({listed}) FROM STDIN') as copy:
                    with gzip.open(source, "rb") as data:
                        for chunk in chunks(data):
                            await copy.write(chunk)
            cursor = await conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND column_default LIKE 'nextval(%%'"
            )
            for table, column in await cursor.fetchall():
                await conn.execute(
                    f"SELECT setval(pg_get_serial_sequence('\"{table}\"', '{column}'),"
                    f' coalesce((SELECT max("{column}") FROM "{table}"), 0) + 1, false)'
                )
    except psycopg.Error as exc:
        raise BackupError(f"state: cannot restore into the database: {exc}") from exc


async def _pg_order(conn: Any, tables: list[str]) -> list[str]:
    """`tables` with each after the tables its foreign keys point at."""
    cursor = await conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f'"
    )
    needs: dict[str, set[str]] = {t: set() for t in tables}
    for child, parent in await cursor.fetchall():
        child, parent = str(child).strip('"'), str(parent).strip('"')
        if child in needs and parent in needs and child != parent:
            needs[child].add(parent)
    ordered: list[str] = []
    while needs:
        ready = sorted(t for t, n in needs.items() if not n - set(ordered))
        if not ready:
            raise BackupError(f"tables that point at each other: {sorted(needs)}")
        ordered += ready
        for t in ready:
            del needs[t]
    return ordered


async def refuse_live_cluster(url: str) -> None:
    """A database a daemon still beats in is not restored into."""
    import psycopg

    try:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cursor = await conn.execute(
                "SELECT count(*) FROM daemons WHERE beat_at > %s", (time.time() - 60,)
            )
            row = await cursor.fetchone()
    except psycopg.errors.UndefinedTable:
        return  # a new database
    except psycopg.Error as exc:
        raise BackupError(f"cannot reach the database: {exc}") from exc
    if row and row[0]:
        raise BackupError("daemons run on that database: stop them, or restore elsewhere")
