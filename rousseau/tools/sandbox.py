"""A sandbox for the bash tool: bubblewrap (`bwrap`), with limits.

Inside, the workspace is the only writable path; the system's programs and /etc are visible
read-only; the home directory, the state database and everything else are not there at all;
/tmp is private; the network is off unless allowed. A database or the config that lies inside
the workspace anyway is masked: a database's whole folder (so its -wal, -shm and -journal,
and files that appear later, are not there either), or, for a database right in the workspace
folder, each of its files (ones that do not exist yet as empty read-only stand-ins). CPU
time and memory are capped per process (prlimit), and the number of processes by a pids
cgroup when one can be made here, else by RLIMIT_NPROC (which the kernel does not apply to root).
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from rousseau.tools import hardening

SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_cgroups = itertools.count(1)


class SandboxError(RuntimeError):
    """The sandbox cannot run here (bwrap missing or refused); the message says why."""

    pass


def _pids_cgroup_root() -> Path | None:
    """Where a pids cgroup can be made for our children, if anywhere (cgroup v1 or v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # v1
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
            if os.access(base, os.W_OK):
                return base
        if controllers == "":  # v2: needs the pids controller delegated to our cgroup
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            try:
                delegated = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if "pids" in delegated and os.access(base, os.W_OK):
                return base
    return None


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    network: bool = False
    cpu_seconds: int = 60
    memory_mb: int = 1024
    processes: int = 256
    hidden: tuple[Path, ...] = ()
    """Files to hide where the sandbox would see them (the config, the state database)."""
    databases: tuple[Path, ...] = ()
    """SQLite databases to hide, with their -wal, -shm and -journal files, wherever they are."""
    binary: str = "bwrap"
    cgroup_root: Path | None = field(default_factory=_pids_cgroup_root)

    @property
    def process_limit(self) -> str:
        """How the number of processes is capped here."""
        if self.cgroup_root is not None:
            return f"pids cgroup (max {self.processes})"
        if os.getuid() != 0:
            return f"RLIMIT_NPROC ({self.processes} more processes for this user)"
        return "none (running as root without a writable pids cgroup)"

    def new_cgroup(self) -> Path | None:
        if self.cgroup_root is None:
            return None
        path = self.cgroup_root / f"rousseau-{os.getpid()}-{next(_cgroups)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(self.processes))
        except OSError:
            return None
        return path

    @staticmethod
    def remove_cgroup(path: Path | None) -> None:
        """Kill what is left in a finished command's cgroup and remove it (blocking, at most
        a second: killed members may take a moment to go)."""
        hardening.remove_cgroup(path)

    @cached_property
    def _system(self) -> list[str]:
        """The part of bwrap's command line that is the same for every command."""
        binary = shutil.which(self.binary) or self.binary
        args = [binary, "--die-with-parent", "--new-session", "--unshare-all"]
        if self.network:
            args.append("--share-net")
        for folder in _SYSTEM_DIRS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if os.path.isdir("/etc/rousseau"):  # the service's environment file holds secrets
            args += ["--tmpfs", "/etc/rousseau"]
        return args

    def command(self, workspace: Path, script: str, cgroup: Path | None = None) -> list[str]:
        """The argv that runs `script` with /bin/sh inside the sandbox."""
        args = [*self._system, "--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
        args += self._masks(Path(os.path.realpath(workspace)))
        args += ["--setenv", "HOME", str(workspace), "--", "/bin/sh", "-c", script]
        limits = [
            "prlimit",
            f"--cpu={self.cpu_seconds}",
            f"--as={self.memory_mb * 1024 * 1024}",
        ]
        if cgroup is None and os.getuid() != 0:
            limits.append(f"--nproc={_user_tasks() + self.processes}")
        wrapped = [*limits, "--", *args]
        if cgroup is not None:  # join the cgroup first, then become the sandbox
            join = f'echo $$ > {shlex.quote(str(cgroup / "cgroup.procs"))} && exec "$@"'
            return ["/bin/sh", "-c", join, "sandbox", *wrapped]
        return wrapped

    def _masks(self, workspace: Path) -> list[str]:
        """bwrap arguments that hide the databases and `hidden` files the sandbox would see."""
        roots = [workspace, *{Path(os.path.realpath(d)) for d in _SYSTEM_DIRS if os.path.isdir(d)}]

        def root_of(path: Path) -> Path | None:
            return next((r for r in roots if path == r or path.is_relative_to(r)), None)

        args: list[str] = []
        folders: list[Path] = []
        for database in self.databases:
            folder = database.parent
            root = root_of(folder)
            if root is None:  # not in the sandbox at all
                continue
            if folder != root:  # the whole folder, whatever appears in it later
                if folder not in folders and (root == workspace or folder.is_dir()):
                    folders.append(folder)
                    args += ["--tmpfs", str(folder)]
                continue
            for path in (database, *(Path(f"{database}{s}") for s in SQLITE_SIDECARS)):
                # a missing file becomes an empty stand-in the sandbox cannot write (only in
                # the workspace: elsewhere the sandbox cannot create it either)
                if path.exists() or root == workspace:
                    args += ["--ro-bind", "/dev/null", str(path)]
        for secret in self.hidden:
            if secret.exists() and not any(secret.is_relative_to(f) for f in folders):
                args += ["--ro-bind", "/dev/null", str(secret)]
        return args

    def check(self, workspace: Path) -> str:
        """Run a harmless command inside; raise SandboxError saying why it cannot."""
        if shutil.which(self.binary) is None:
            raise SandboxError(f"{self.binary} is not installed (Debian: apt install bubblewrap)")
        if shutil.which("prlimit") is None:
            raise SandboxError("prlimit is not installed (Debian: util-linux)")
        done = subprocess.run(
            self.command(workspace, "echo ok"), capture_output=True, text=True, timeout=20
        )
        if done.returncode != 0 or done.stdout.strip() != "ok":
            raise SandboxError(f"bwrap cannot run here: {done.stderr.strip()[:300]}")
        return (
            f"bwrap works; network {'on' if self.network else 'off'}; "
            f"process limit: {self.process_limit}"
        )


def _user_tasks() -> int:
    """Threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid = str(os.getuid())
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [uid]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count
