"""One daemon per database: an exclusive lock beside the state file, and what the daemon
publishes about itself for `rousseau status`.

Two daemons on one database would both deliver every reply (doubled, out of order), so
`rousseau run` takes `<db>.lock` with flock before it opens anything; the kernel drops the
lock when the process ends, however it ends, so a crash never leaves a stale lock behind.
CLI commands never take it: they keep working beside a running daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rousseau.agent.errors import StoreError
from rousseau.private import private_folder


class DaemonRunningError(StoreError):
    """Another daemon holds this database."""


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """What a running daemon publishes: who it is and how each transport fares."""

    pid: int
    started_at: float
    updated_at: float = 0.0
    transports: dict[str, dict[str, Any]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    """The config it runs: its digest, and how its last reload went."""


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def info_path(db: Path) -> Path:
    return db.with_name(db.name + ".daemon.json")


class DaemonLock:
    """The exclusive lock of a running daemon on its database."""

    def __init__(self, db: str | Path) -> None:
        self.db = Path(db).expanduser()
        self._fd: int | None = None
        self.started_at = time.time()

    def acquire(self) -> None:
        """Take the lock, or raise DaemonRunningError naming the daemon that has it."""
        private_folder(self.db.parent)
        fd = os.open(lock_path(self.db), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not _exclusive(fd):
            os.close(fd)
            holder = running(self.db)
            who = f"pid {holder.pid}" if holder else "another process"
            raise DaemonRunningError(
                f"a daemon is already running on {self.db} ({who}); stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.started_at}\n".encode())
        self._fd = fd
        self.publish({})

    def publish(
        self, transports: dict[str, dict[str, Any]], config: dict[str, Any] | None = None
    ) -> None:
        """Write what `rousseau status` shows (atomically: a reader never sees half)."""
        info = {
            "pid": os.getpid(),
            "started_at": self.started_at,
            "updated_at": time.time(),
            "transports": transports,
            "config": config or {},
        }
        target = info_path(self.db)
        scratch = target.with_name(target.name + f".{os.getpid()}")
        scratch.write_text(json.dumps(info))
        os.chmod(scratch, 0o600)
        os.replace(scratch, target)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            info_path(self.db).unlink()
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def _exclusive(fd: int) -> bool:
    """flock(LOCK_EX), retried for a moment: `running()` holds a shared lock for a few
    microseconds while it looks, which must not make a starting daemon think it has company."""
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.01)
    return False


def running(db: str | Path) -> DaemonInfo | None:
    """The daemon holding `db`'s lock, or None when no daemon runs on it."""
    db = Path(db).expanduser()
    try:
        fd = os.open(lock_path(db), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: a daemon runs
        else:
            return None
        first = os.read(fd, 200).decode(errors="replace").split()
    finally:
        os.close(fd)
    pid, started = (int(first[0]), float(first[1])) if len(first) == 2 else (0, 0.0)
    try:
        data = json.loads(info_path(db).read_text())
        return DaemonInfo(
            pid=int(data["pid"]),
            started_at=float(data["started_at"]),
            updated_at=float(data.get("updated_at", 0.0)),
            transports=dict(data.get("transports", {})),
            config=dict(data.get("config") or {}),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return DaemonInfo(pid=pid, started_at=started)
