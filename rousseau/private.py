"""Files and folders only the daemon's user can read: the state holds every conversation, and
the credentials the platforms gave it."""

from __future__ import annotations

import os
from pathlib import Path


def private_folder(path: Path) -> None:
    """Make `path` and each missing folder above it, 0700; folders already there are left
    as they are (`Path.mkdir(parents=True)` would give the parents the umask's mode)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile by another process
            pass


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, atomically and 0600 whatever the umask (written beside it,
    synced, then moved over it)."""
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def private_file(path: Path) -> None:
    """Make `path`, empty and 0600, unless it is there (its folders as `private_folder`).
    SQLite gives a database's -wal and -shm files the database file's mode."""
    private_folder(path.parent)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
