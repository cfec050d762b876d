"""Backups: one file holding the state (SQLite's online backup, or a consistent snapshot of
PostgreSQL's tables), the media blobs, the transports' key stores and the config with its
secrets taken out; checked part by part, and restored into a new state path or database.

The file is a tar (each part a member, the state's parts gzipped), with `manifest.json`
first: every member's sha256 and size, and what the state holds (rows per table), so that
`verify` can name the part that is damaged. It is written 0600 whatever it holds: the
conversations are private too. Hand-rolled around the standard library (tarfile, sqlite3's
backup API) and psycopg's COPY: no backup library knows this layout.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import yaml

from rousseau.agent import StoreError

if TYPE_CHECKING:
    from rousseau.config import Config

FORMAT = 1
MANIFEST = "manifest.json"
SQLITE = "state/sessions.db.gz"
COUNTED = ("sessions", "messages", "cron_jobs", "cron_runs", "profile_entries", "outbox")
"""Tables whose rows `verify` prints."""
TRANSIENT = frozenset({"daemons", "pollers", "session_claims", "approvals", "schema_migrations"})
"""PostgreSQL tables not backed up: who is alive now, and the schema's own record."""
SCHEMA = "SELECT coalesce(max(version), 0) FROM schema_migrations"
REMOVED = "REMOVED: restore it (or give env:NAME or file:PATH)"


class BackupError(StoreError):
    """A backup that cannot be made, read or restored (the message names the part)."""


@dataclass
class Manifest:
    made_at: float
    backend: str
    """sqlite or postgresql."""
    schema: int
    """The store's schema version when it was made."""
    with_secrets: bool
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Member name -> {sha256, size}."""
    rows: dict[str, int] = field(default_factory=dict)
    """Table -> rows, as made."""
    columns: dict[str, list[str]] = field(default_factory=dict)
    """PostgreSQL: each table's columns, in the order of its COPY."""
    keys: dict[str, str] = field(default_factory=dict)
    """Key store member -> where it was (the config's path)."""
    format: int = FORMAT


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tar.gettarinfo(str(path), arcname=name)
    info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
    with path.open("rb") as f:
        tar.addfile(info, f)


def _gzipped(path: Path, into: Path) -> Path:
    with path.open("rb") as source, gzip.open(into, "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target, 1 << 20)
    return into


def sqlite_snapshot(db: Path, into: Path) -> None:
    """SQLite's online backup of `db` (consistent while a daemon writes to it)."""
    try:
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as source:
            with contextlib.closing(sqlite3.connect(into)) as target:
                source.backup(target)
    except sqlite3.Error as exc:
        raise BackupError(f"state: cannot back up {db}: {exc}") from exc


def sqlite_rows(db: Path) -> tuple[int, dict[str, int]]:
    """The schema version and the rows of the counted tables."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
        schema = int(version.fetchone()[0])
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        rows = {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
            for t in COUNTED
            if t in tables
        }
    return schema, rows


def _secretless_config(config: Config) -> bytes:
    """The config file with each secret written in it replaced (by the environment
    variable that fills it, where there is a well-known one, else a note)."""
    from rousseau.config.loading import plain_secrets, well_known_variable

    text = Path(config.source).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    for key in plain_secrets(Path(config.source)):
        path = key.split(".")
        node = data
        for part in path[:-1]:
            node = node[part]
        var = well_known_variable(key)
        node[path[-1]] = f"env:{var}" if var else REMOVED
    secrets = set(config.secrets())

    def scrub(node: Any) -> Any:  # a secret also written under a key that is not one's
        if isinstance(node, dict):
            return {k: scrub(v) for k, v in node.items()}
        if isinstance(node, list):
            return [scrub(v) for v in node]
        if isinstance(node, str) and any(s in node for s in secrets if len(s) >= 6):
            return REMOVED
        return node

    return yaml.safe_dump(scrub(data), sort_keys=False, allow_unicode=True).encode()


def key_stores(config: Config) -> dict[str, Path]:
    """The transports' key stores that exist: member name -> path."""
    found: dict[str, Path] = {}
    if config.matrix is not None and config.matrix.store:
        folder = Path(config.matrix.store).expanduser()
        if folder.is_dir():
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                found[f"keys/matrix/{path.relative_to(folder).as_posix()}"] = path
    if config.whatsapp is not None:
        path = Path(config.whatsapp.store).expanduser()
        if path.is_file():
            found["keys/whatsapp/whatsapp.db"] = path
    return found


async def create(
    config: Config, target: Path, *, with_secrets: bool = False, whole: bool = True
) -> Manifest:
    """A backup of what `config` keeps (not `whole`: its state alone), written to `target`
    (atomically, 0600); the file work on a thread (a daemon makes them while it serves)."""
    with tempfile.TemporaryDirectory(prefix="rousseau-backup-") as scratch:
        work = Path(scratch)
        if config.state.url is not None:
            url = config.state.url.get_secret_value()
            manifest = Manifest(time.time(), "postgresql", 0, with_secrets)
            from rousseau.state.backup_postgres import snapshot

            members = await snapshot(url, work, manifest)
        else:
            manifest, members = await anyio.to_thread.run_sync(
                _sqlite_members, config, work, with_secrets
            )
        write = functools.partial(
            _write, config, target, manifest, members, work, with_secrets, whole
        )
        await anyio.to_thread.run_sync(write)
    return manifest


def _sqlite_members(
    config: Config, work: Path, with_secrets: bool
) -> tuple[Manifest, dict[str, Path]]:
    db = Path(config.state.path).expanduser()
    if not db.is_file():
        raise BackupError(f"state: no store at {db} (state.path)")
    copy = work / "sessions.db"
    sqlite_snapshot(db, copy)
    schema, rows = sqlite_rows(copy)
    manifest = Manifest(time.time(), "sqlite", schema, with_secrets, rows=rows)
    return manifest, {SQLITE: _gzipped(copy, work / "sessions.db.gz")}


def _write(
    config: Config,
    target: Path,
    manifest: Manifest,
    members: dict[str, Path],
    work: Path,
    with_secrets: bool,
    whole: bool,
) -> None:
    """The tar: the manifest first (every other part hashed before), then the state's
    parts, the media blobs, the key stores and the config (not `whole`: the state alone)."""
    target = target.expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    body: list[tuple[str, Path]] = list(members.items())
    media = config.state.media_folder()
    if whole and media.is_dir():
        blobs = sorted(p for p in media.rglob("*") if p.is_file())
        body += [(f"media/{p.relative_to(media).as_posix()}", p) for p in blobs]
    keys = key_stores(config) if whole else {}
    manifest.keys = {name: str(path) for name, path in keys.items()}
    body += _key_copies(keys, work)
    told: tuple[str, bytes] | None = None
    if config.source:
        said = Path(config.source).read_bytes() if with_secrets else _secretless_config(config)
        told = ("config/config.yaml", said)
    manifest.parts = {n: {"sha256": _hash(p), "size": p.stat().st_size} for n, p in body}
    if told is not None:
        manifest.parts[told[0]] = {
            "sha256": hashlib.sha256(told[1]).hexdigest(),
            "size": len(told[1]),
        }
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            _add_bytes(tar, MANIFEST, json.dumps(manifest.__dict__, indent=1).encode())
            for name, path in body:  # (each hashed already, into the manifest)
                _add_file(tar, name, path)
            if told is not None:
                _add_bytes(tar, *told)
        os.replace(part, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _key_copies(keys: dict[str, Path], work: Path) -> list[tuple[str, Path]]:
    """Each key store file, a SQLite one through the backup API (a daemon may be writing)."""
    copies = []
    for n, (name, path) in enumerate(keys.items()):
        with path.open("rb") as f:
            header = f.read(16)
        if header == b"SQLite format 3\x00":
            copy = work / f"key{n}.db"
            sqlite_snapshot(path, copy)
            path = copy
        copies.append((name, path))
    return copies


def chunks(source: Any) -> Iterator[bytes]:
    while chunk := source.read(1 << 20):
        yield bytes(chunk)


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- reading a backup ----------------------------------------------------------------------


@dataclass
class Checked:
    manifest: Manifest
    rows: dict[str, int]
    media: int
    keys: int


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[tarfile.TarFile, Manifest]]:
    try:
        tar = tarfile.open(path.expanduser(), mode="r:")
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"{path}: not a backup ({exc})") from None
    with tar:
        try:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise BackupError(f"{path}: not a backup (no manifest first)")
            raw = tar.extractfile(first)
            assert raw is not None
            said = json.loads(raw.read())
            manifest = Manifest(**said)
        except (tarfile.TarError, ValueError, TypeError) as exc:
            raise BackupError(f"{MANIFEST}: unreadable ({exc})") from None
        if manifest.format != FORMAT:
            raise BackupError(f"{MANIFEST}: format {manifest.format}, not {FORMAT}")
        yield tar, manifest


def verify(path: Path) -> Checked:
    """Every part read and checked against the manifest (its hash; the state opened and its
    rows counted); BackupError naming the first part that fails."""
    with _opened(path) as (tar, manifest), tempfile.TemporaryDirectory() as scratch:
        seen: set[str] = set()
        rows: dict[str, int] = {}
        try:
            for member in tar:
                name = member.name
                if name == MANIFEST:
                    continue
                expected = manifest.parts.get(name)
                if expected is None:
                    raise BackupError(f"{name}: not in the manifest")
                source = tar.extractfile(member)
                if source is None:
                    raise BackupError(f"{name}: not a file")
                state = name.startswith("state/")  # kept to be opened; the rest only hashed
                local = Path(scratch) / "part"
                digest = hashlib.sha256()
                with local.open("wb") if state else contextlib.nullcontext() as out:
                    for chunk in chunks(source):
                        digest.update(chunk)
                        if out is not None:
                            out.write(chunk)
                if digest.hexdigest() != expected["sha256"]:
                    raise BackupError(f"{name}: damaged (its checksum does not match)")
                if state:
                    rows |= _check_state(name, local, manifest, Path(scratch))
                seen.add(name)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BackupError(f"{path}: cut short or damaged ({exc})") from None
        missing = sorted(manifest.parts.keys() - seen - {MANIFEST})
        if missing:
            raise BackupError(f"{missing[0]}: missing from the backup")
    media = sum(1 for n in manifest.parts if n.startswith("media/"))
    keys = sum(1 for n in manifest.parts if n.startswith("keys/"))
    return Checked(manifest, rows, media, keys)


def _check_state(name: str, local: Path, manifest: Manifest, scratch: Path) -> dict[str, int]:
    """The state's part opened: SQLite's checked whole and counted, a PostgreSQL table's
    rows counted; each against the manifest."""
    if name == SQLITE:
        db = scratch / "check.db"
        try:
            with gzip.open(local, "rb") as source, db.open("wb") as out:
                shutil.copyfileobj(source, out)
            with contextlib.closing(sqlite3.connect(db)) as conn:
                (said,) = conn.execute("PRAGMA integrity_check").fetchone()
            if said != "ok":
                raise BackupError(f"{name}: the database is damaged ({said})")
            _, rows = sqlite_rows(db)
        except (OSError, EOFError, sqlite3.Error) as exc:
            raise BackupError(f"{name}: unreadable ({exc})") from None
        finally:
            db.unlink(missing_ok=True)
        if rows != manifest.rows:
            raise BackupError(f"{name}: holds other rows than the manifest says")
        return rows
    if name.startswith("state/postgresql/"):
        table = name.removeprefix("state/postgresql/").removesuffix(".copy.gz")
        try:
            with gzip.open(local, "rb") as source:
                count = sum(chunk.count(b"\n") for chunk in chunks(source))
        except (OSError, EOFError) as exc:
            raise BackupError(f"{name}: unreadable ({exc})") from None
        if count != manifest.rows.get(table):
            raise BackupError(f"{name}: {count} rows, the manifest says {manifest.rows.get(table)}")
        return {table: count} if table in COUNTED else {}
    return {}


async def restore(
    path: Path, config: Config, *, state_path: Path | None, url: str | None
) -> Checked:
    """The backup checked, then its state written into a new SQLite file (`state_path`) or
    an empty PostgreSQL database (`url`), its media into the config's media folder (files
    by their hash: nothing there is overwritten) and its key stores where the config keeps
    them, where none is yet."""
    checked = await anyio.to_thread.run_sync(verify, path)
    manifest = checked.manifest
    if (url is None) == (state_path is None):
        raise BackupError("restore into one place: a new state file or an empty database")
    if manifest.backend == "sqlite" and state_path is None:
        raise BackupError("this backup is of a SQLite store: restore it into a state file")
    if manifest.backend == "postgresql" and url is None:
        raise BackupError("this backup is of a PostgreSQL store: restore it into a database")
    with _opened(path) as (tar, _), tempfile.TemporaryDirectory() as scratch:
        if state_path is not None:
            put = functools.partial(_restore_sqlite, tar, state_path, Path(scratch))
            await anyio.to_thread.run_sync(put)
        else:
            assert url is not None
            from rousseau.state.backup_postgres import restore_into

            await restore_into(tar, manifest, url, Path(scratch))
    await anyio.to_thread.run_sync(_restore_all_files, path, config, manifest)
    return checked


def _restore_all_files(path: Path, config: Config, manifest: Manifest) -> None:
    with _opened(path) as (tar, _):
        _restore_files(tar, config, manifest)


def _restore_sqlite(tar: tarfile.TarFile, target: Path, scratch: Path) -> None:
    target = target.expanduser()
    if target.exists():
        raise BackupError(f"{target} exists: restore into a new state path")
    source = tar.extractfile(SQLITE)
    if source is None:
        raise BackupError(f"{SQLITE}: missing from the backup")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = scratch / "restored.db"
    with gzip.open(source, "rb") as data, part.open("wb") as out:
        shutil.copyfileobj(data, out, 1 << 20)
    part.chmod(0o600)
    shutil.move(str(part), target)
    from rousseau.state import Store

    Store(target).close()  # brought up to this version's schema


def _restore_files(tar: tarfile.TarFile, config: Config, manifest: Manifest) -> None:
    media = config.state.media_folder()
    keys = {name: Path(where) for name, where in manifest.keys.items()}
    if config.matrix is not None and config.matrix.store:  # where this config keeps them
        folder = Path(config.matrix.store).expanduser()
        keys |= {n: folder / n.removeprefix("keys/matrix/") for n in keys if "matrix" in n}
    if config.whatsapp is not None:
        keys |= {n: Path(config.whatsapp.store).expanduser() for n in keys if "whatsapp" in n}
    for member in tar:
        if member.name.startswith("media/"):
            target = media / member.name.removeprefix("media/")
        elif member.name in keys:
            target = keys[member.name]
        else:
            continue
        if ".." in Path(member.name).parts or target.exists():
            continue  # a blob already there is the same bytes; a key store is kept
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        source = tar.extractfile(member)
        if source is None:
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)


def rotate(folder: Path, keep: int) -> list[Path]:
    """The oldest backups in `folder` beyond the newest `keep`, deleted; what was deleted."""
    made = sorted(folder.glob("rousseau-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    gone = made[keep:]
    for old in gone:
        old.unlink(missing_ok=True)
    return gone


async def scheduled(config: Config) -> tuple[Path, Manifest, int]:
    """One backup into `backup.dir`, then the oldest beyond `backup.keep` deleted: where it
    went, what it holds, how many were deleted."""
    section = config.backup
    target = default_name(await anyio.to_thread.run_sync(Path(section.dir).expanduser))
    manifest = await create(config, target)
    gone = await anyio.to_thread.run_sync(rotate, target.parent, section.keep)
    return target, manifest, len(gone)


def prune_upgrade_copies(config: Config, made_before: float) -> list[str]:
    """The copies kept before migrating the store (`STATE.before-vN.bak` beside a SQLite
    store, `before-vN-*.tar` in backup.dir for PostgreSQL) made before `made_before`,
    deleted: the start after a migration has gone well."""
    from rousseau.state.migrations import prune_copies

    gone = [] if config.state.url else prune_copies(config.state.path, made_before)
    folder = Path(config.backup.dir).expanduser()
    if folder.is_dir():
        for old in folder.glob("before-v*.tar"):
            if old.stat().st_mtime < made_before:
                old.unlink(missing_ok=True)
                gone.append(str(old))
    return gone


def default_name(folder: Path) -> Path:
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return folder / f"rousseau-{stamp}-{int(now * 1000) % 1000:03d}.tar"
