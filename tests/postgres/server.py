"""A real PostgreSQL for the tests: Debian's PostgreSQL 15 binaries, `initdb` into a
temporary folder and `pg_ctl` on a free port of 127.0.0.1, once per test session (per xdist
worker); each test gets a database of its own. `.ci/run` installs the Debian package
postgresql-15; ROUSSEAU_TEST_PG_BIN names another folder of binaries.

PostgreSQL refuses to run as root: as root, the server runs as Debian's `postgres` user.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import free_port

USER = "rousseau"


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL 15's server binaries, if they are installed."""
    named = os.environ.get("ROUSSEAU_TEST_PG_BIN")
    for folder in [named] if named else ["/usr/lib/postgresql/15/bin"]:
        if folder and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


class Postgres:
    def __init__(self, bin: Path) -> None:
        self.bin = bin
        # Not under pytest's own temporary folder: as root, the server's user must reach it.
        self.root = Path(tempfile.mkdtemp(prefix="rousseau-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._names = itertools.count(1)
        self._as: list[str] = []

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> Postgres:
        if os.getuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "postgres", "--"]
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=200"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "start",
        )
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
