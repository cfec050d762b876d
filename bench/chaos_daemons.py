"""The daemons of the chaos benchmark: real `rousseau run` processes (this source tree's code,
whatever is installed), one on SQLite or three sharing a throwaway PostgreSQL 15, and the
means of hurting them: a small tmpfs to fill, libfaketime to set a daemon's clock back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.postgres.server import Postgres, postgres_bin

ROOT = Path(__file__).resolve().parent.parent

LEASE = 15.0
"""state.lease on PostgreSQL: the default, so a dead daemon's work waits what it would."""


class Member:
    """One `rousseau run`: a folder of its own (config, log, lock, workspace), started,
    killed and stopped at will."""

    def __init__(
        self,
        folder: Path,
        config: dict[str, Any],
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "config.yaml"
        self.config.write_text(json.dumps(config))  # JSON is YAML
        self.config.chmod(0o600)
        self.log = folder / "daemon.log"
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(folder),
            "PYTHONPATH": str(ROOT),  # this tree's code, not an installed copy
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []
        """The exit code of each SIGTERM stop."""

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rousseau", "--config", str(self.config), "run"],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """kill -9."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, grace: float = 60) -> None:
        """SIGTERM, as a service manager stops it; its exit code is kept."""
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.exits.append(self.proc.wait(timeout=grace))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exits.append(self.proc.wait())

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines of its log (over all its runs)."""
        out = []
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    out.append(event)
        return out

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Tmpfs:
    """A small tmpfs (root only) to put a store on and then fill, as a full disk is."""

    def __init__(self, where: Path, size_mib: int) -> None:
        self.where = where
        self.size_mib = size_mib
        self.filler = where / "filler"

    @staticmethod
    def unavailable() -> str | None:
        """Why a tmpfs cannot be mounted here, or None."""
        if os.geteuid() != 0:
            return "mounting a tmpfs needs root"
        with tempfile.TemporaryDirectory(prefix="rousseau-chaos-probe-") as probe:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                return f"mount -t tmpfs failed: {done.stderr.strip()}"
            subprocess.run(["umount", probe], check=True)
        return None

    def mount(self) -> Tmpfs:
        self.where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mib}m,mode=0755", "tmpfs", self.where],
            check=True,
        )
        return self

    def fill(self) -> None:
        """Write until the disk says no space is left."""
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError), self.filler.open("wb") as out:
            while True:
                out.write(chunk)
                out.flush()

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "--lazy", self.where], check=False)


class Clock:
    """libfaketime on a daemon: its wall clock follows a file this benchmark writes, its
    monotonic clock is left alone (as when an administrator or NTP steps the clock)."""

    LIBRARY = "libfaketimeMT.so.1"
    """The library's thread-safe build (the daemon has threads)."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "faketime"
        self.file.write_text("+0\n")

    @classmethod
    def library(cls) -> Path | None:
        """Where Debian's faketime package puts it (a folder per architecture)."""
        for folder in (Path("/usr/lib"), Path("/usr/local/lib")):
            for found in sorted(folder.glob(f"*/faketime/{cls.LIBRARY}")):
                return found
            if (folder / "faketime" / cls.LIBRARY).is_file():
                return folder / "faketime" / cls.LIBRARY
        return None

    @classmethod
    def unavailable(cls) -> str | None:
        if cls.library() is None:
            return "libfaketime is not installed (Debian package faketime)"
        return None

    @property
    def env(self) -> dict[str, str]:
        # Preloaded into the daemon itself: the faketime command would fork, and a SIGTERM
        # meant for the daemon would end the wrapper alone.
        return {
            "LD_PRELOAD": str(self.library()),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def set_back(self, seconds: int) -> None:
        self.file.write_text(f"-{seconds}\n")


class SQLiteBackend:
    """One daemon, its state in a SQLite file of its own folder (or `state_dir`)."""

    name = "sqlite"
    members = 1

    def __init__(self) -> None:
        self.db: Path | None = None

    def state(self, member: Path, state_dir: Path | None) -> dict[str, Any]:
        self.db = (state_dir or member) / "state.db"
        return {"path": str(self.db)}

    def ledger(self) -> tuple[Counter[str], dict[str, float]]:
        """The outbox rows per reply text, and when each message reached the daemon (read
        once the daemons have stopped)."""
        assert self.db is not None
        with contextlib.closing(sqlite3.connect(self.db)) as db:
            rows = Counter(text for (text,) in db.execute("SELECT text FROM outbox"))
            arrived = dict(db.execute("SELECT text, received_at FROM inbox"))
        return rows, arrived


class PostgresBackend:
    """Three daemons sharing a database of a throwaway PostgreSQL 15 server."""

    name = "postgres"
    members = 3

    def __init__(self, server: Postgres) -> None:
        self.server = server
        self.url = ""

    def new_database(self) -> None:
        self.url = self.server.new_database()

    def state(self, member: Path, state_dir: Path | None) -> dict[str, Any]:
        return {"url": self.url, "lease": f"{LEASE:g}s", "path": str(member / "state.db")}

    def poller(self, transport: str) -> str | None:
        """The id of the daemon last elected to poll `transport` (it names its pid)."""
        import psycopg

        with psycopg.connect(self.url) as db:
            row = db.execute(
                "SELECT daemon FROM pollers WHERE transport = %s", (transport,)
            ).fetchone()
        return None if row is None else str(row[0])

    def ledger(self) -> tuple[Counter[str], dict[str, float]]:
        import psycopg

        with psycopg.connect(self.url) as db:
            rows = Counter(str(t) for (t,) in db.execute("SELECT text FROM outbox").fetchall())
            arrived = {
                str(t): float(at)
                for t, at in db.execute("SELECT text, received_at FROM inbox").fetchall()
            }
        return rows, arrived


@contextlib.contextmanager
def postgres_server(tmpfs_mib: int | None = None) -> Iterator[tuple[Postgres, Tmpfs | None]]:
    """A PostgreSQL 15 server in a temporary folder (tests/postgres/server.py), on a tmpfs
    of its own when `tmpfs_mib` is given (returned with it); stopped and removed at the end."""
    folder = postgres_bin()
    if folder is None:
        raise RuntimeError("PostgreSQL 15 is not installed (Debian package postgresql-15)")
    server = Postgres(folder)
    disk = Tmpfs(server.root, tmpfs_mib).mount() if tmpfs_mib else None
    try:
        server.start()
        yield server, disk
    finally:
        try:
            server.stop()
        finally:
            if disk is not None:
                disk.unmount()
                shutil.rmtree(server.root, ignore_errors=True)


def base_config(model_url: str, member: Path) -> dict[str, Any]:
    """What every daemon of the benchmark shares, bar its transports and its state."""
    return {
        "provider": "openai",
        # A hung request is given up after 10 s and tried again (twice), as the SDK does.
        "openai": {"api_key": "sk-chaos", "base_url": model_url + "/v1", "timeout": "10s"},
        "agent": {"workspace": str(member / "ws")},
        "ratelimit": {"default": "1000/1s"},
        "shutdown_grace": "10s",
        "log": {"format": "json", "level": "info"},
    }
