"""Keeping bash's processes away from the daemon's secrets and inside their time limit.

`make_undumpable()` closes the calling process's /proc/PID/environ and memory to other
processes of the same user, bash's among them; `app.build_registry` calls it, so every
`rousseau` command that gives the agent its tools (run, chat, mcp, ...) is covered.

Run as a script (`launcher()` builds the command line), this file is the parent of every
command bash runs: a child subreaper, so that what the command starts and orphans, by
`setsid`, a double fork or `nohup`, re-parents to it and stays findable. When the command
ends, or the launcher is told to stop (SIGTERM, or the death of the daemon), it kills every
process below it, and every process of its cgroup if it was given one. Run by root, it first
gives up the capabilities that open a non-dumpable process anyway (CAP_SYS_PTRACE, and on
some kernels CAP_SYS_ADMIN or CAP_PERFMON); bwrap does without them.

Standard library only: the script runs as `python -I -S` without the package around it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
INSPECTION_CAPS = (19, 21, 38)
"""CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON: each lets root read a non-dumpable process."""
_CAPABILITY_VERSION_3 = 0x20080522

SUPPORTED = sys.platform == "linux" and bool(sys.executable)
"""Whether commands run under the launcher here (Linux only: subreapers and /proc)."""
STOP_GRACE = 5.0
"""How long the launcher gets to clean up after SIGTERM before its group is killed."""

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_cgroups = itertools.count(1)


@cache
def _libc() -> Any:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl(option: int, arg: int = 0) -> bool:
    libc = _libc()
    if libc is None:
        return False
    return int(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)) == 0


def make_undumpable() -> bool:
    """Make this process non-dumpable (Linux; elsewhere nothing happens): its environment,
    memory and open files under /proc/PID are then closed to other processes of its user,
    and it leaves no core dump. True when that is now the case."""
    return _prctl(PR_SET_DUMPABLE, 0)


def launcher(argv: Sequence[str], cgroup: Path | None = None) -> list[str]:
    """`argv` run under the launcher (with its processes also put in `cgroup`), or `argv`
    unchanged where the launcher is not supported."""
    if not SUPPORTED:
        return list(argv)
    head = [sys.executable, "-I", "-S", os.path.abspath(__file__)]
    if cgroup is not None:
        head += ["--cgroup", str(cgroup)]
    return [*head, "--", *argv]


# -- cgroups ----------------------------------------------------------------------------------


@cache
def _cgroup2_base() -> Path | None:
    """This process's own cgroup v2 folder, if it may make cgroups below it and move
    processes into them."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = [line.split()[4] for line in mountinfo if " - cgroup2 " in line]
    paths = [line[3:] for line in own if line.startswith("0::")]
    if not mounts or not paths:
        return None
    base = Path(mounts[0]) / paths[0].lstrip("/")
    if os.access(base, os.W_OK) and os.access(base / "cgroup.procs", os.W_OK):
        return base
    return None


def new_cgroup() -> Path | None:
    """A fresh cgroup v2 for one command's processes, where one can be made (blocking)."""
    base = _cgroup2_base()
    if base is None:
        return None
    path = base / f"rousseau-bash-{os.getpid()}-{next(_cgroups)}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def kill_cgroup(path: Path) -> bool:
    """SIGKILL every process in the cgroup (v2 in one write, else one by one); True when
    none was left to kill."""
    try:
        (path / "cgroup.kill").write_text("1")
    except OSError:
        pass  # cgroup v1, or a kernel before 5.14
    try:
        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return True
    for pid in pids:
        _kill(pid)
    return not pids


def remove_cgroup(path: Path | None, wait: float = 1.0) -> None:
    """Kill what is left in a finished command's cgroup and remove it (blocking, at most
    `wait` seconds: killed members take a moment to go)."""
    if path is None:
        return
    deadline = time.monotonic() + wait
    while True:
        kill_cgroup(path)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.025)


# -- the launcher -----------------------------------------------------------------------------


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(root: int) -> list[int]:
    """Live processes below `root`, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    queue = [root]
    while queue:
        below = children.get(queue.pop(), [])
        found += below
        queue += below
    return found


def _reap() -> dict[int, int]:
    """Collect every finished child: {pid: wait status}."""
    done: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def _kill_everything(cgroup: Path | None, patience: float = 5.0) -> None:
    """Kill every descendant until none is left: orphans re-parent to us as they lose
    their parents, so each round finds what the last one made an orphan."""
    me = os.getpid()
    deadline = time.monotonic() + patience
    while True:
        if cgroup is not None:
            kill_cgroup(cgroup)
        alive = _descendants(me)
        for pid in alive:
            _kill(pid)
        _reap()
        if not alive or time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _drop_inspection_caps() -> None:
    """Give up INSPECTION_CAPS for good, for this process and everything it runs. Without
    them (any user but root), nothing to do."""
    libc = _libc()
    if libc is None:
        return
    dropped = [cap for cap in INSPECTION_CAPS if _prctl(PR_CAPBSET_DROP, cap)]
    if not dropped:
        return

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        )

    header = Header(_CAPABILITY_VERSION_3, 0)
    data = (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return
    for cap in dropped:  # the inheritable set would hand them back to root's children
        keep = ~(1 << (cap % 32)) & 0xFFFFFFFF
        half = data[cap // 32]
        half.effective &= keep
        half.permitted &= keep
        half.inheritable &= keep
    libc.capset(ctypes.byref(header), data)


def _spawn(argv: list[str], cgroup: Path | None) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: the signal state of a fresh process, in the cgroup, then the command
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        if cgroup is not None:
            try:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass  # the subreaper still finds everything
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
    finally:
        os._exit(127)


def main(args: list[str]) -> int:
    """Run `[--cgroup DIR] -- ARGV`; exit with its status (128+N for a signal) once every
    process it started is gone."""
    cgroup = None
    if args[:1] == ["--cgroup"] and len(args) > 1:
        cgroup, args = Path(args[1]), args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: hardening.py [--cgroup DIR] -- COMMAND...\n")
        return 2
    watched = {signal.SIGCHLD, *_STOP_SIGNALS}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # taken by sigwaitinfo, never lost
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _drop_inspection_caps()
    status = 128 + signal.SIGTERM
    try:
        if os.getppid() != parent:  # the daemon died before the death signal was set
            return status
        child = _spawn(args, cgroup)
        while True:
            info = signal.sigwaitinfo(watched)
            if info.si_signo != signal.SIGCHLD:
                status = 128 + info.si_signo
                break
            done = _reap()
            if child in done:
                code = os.waitstatus_to_exitcode(done[child])
                status = code if code >= 0 else 128 - code
                break
    finally:
        _kill_everything(cgroup)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
