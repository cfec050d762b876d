"""Nothing bash starts outlives its call: not a background job, not a `setsid` or
double-forked escapee of the process group, at the timeout or when the command ends."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from rousseau.agent import ToolCall
from rousseau.tools import BashTool, Workspace, hardening

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")
linux = pytest.mark.skipif(sys.platform != "linux", reason="a child subreaper is Linux only")

# Each starts a child that, once it has escaped, says so (ready) and touches a marker 2 s later.
ESCAPES = {
    "setsid": "setsid sh -c 'touch ready; sleep 2; touch {marker}' >/dev/null 2>&1 &",
    "double-fork": "(sh -c 'touch ready; sleep 2; touch {marker}' >/dev/null 2>&1 &)",
    "nohup": "nohup sh -c 'touch ready; sleep 2; touch {marker}' >/dev/null 2>&1 &",
}
READY = "\nwhile [ ! -e ready ]; do sleep 0.05; done\n"


@pytest.fixture
def tool(tmp_path: Path) -> BashTool:
    return BashTool(Workspace(tmp_path / "ws"), timeout=10, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_an_escaped_child_is_killed_at_the_timeout(tool: BashTool, escape: str) -> None:
    marker = tool.workspace.root / "survived"
    command = ESCAPES[escape].format(marker=marker) + READY + "sleep 30"
    out = await tool.execute({"command": command, "timeout": 1}, CALL)
    assert out.is_error and "timed out after 1 s" in out.content
    await anyio.sleep(3)  # past the escapee's sleep
    assert not marker.exists(), f"a {escape} child outlived the timeout"


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_an_escaped_child_is_killed_when_the_command_ends(
    tool: BashTool, escape: str
) -> None:
    marker = tool.workspace.root / "survived"
    command = ESCAPES[escape].format(marker=marker) + READY + "echo done"
    out = await tool.execute({"command": command}, CALL)
    assert out.content == "done" and not out.is_error
    await anyio.sleep(3)
    assert not marker.exists(), f"a {escape} child outlived its command"


async def test_exit_codes_and_signals_are_reported(tool: BashTool) -> None:
    out = await tool.execute({"command": "exit 7"}, CALL)
    assert out.is_error and out.content == "[exit code 7]"
    out = await tool.execute({"command": "kill -9 $$"}, CALL)
    assert out.is_error and ("[exit code 137]" in out.content or "[exit code -9]" in out.content)
    out = await tool.execute({"command": "no-such-program-here"}, CALL)
    assert out.is_error and "[exit code 127]" in out.content


async def test_a_pipe_into_head_ends_normally(tool: BashTool) -> None:
    """The command gets SIGPIPE back (Python ignores it, and would pass that on)."""
    out = await tool.execute({"command": "yes | head -n 2"}, CALL)
    assert out.content == "y\ny" and not out.is_error  # no "Broken pipe" from yes


@linux
async def test_the_calling_process_does_not_become_a_subreaper(tool: BashTool) -> None:
    await tool.execute({"command": "true"}, CALL)
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    assert flag.value == 0


@linux
def test_the_launcher_alone_kills_what_escaped_when_stopped(tmp_path: Path) -> None:
    """The subreaper by itself (no cgroup): asked to stop, it kills every descendant,
    re-parented orphans included, and only then exits."""
    marker = tmp_path / "survived"
    script = f"setsid sh -c 'sleep 2; touch {marker}' >/dev/null 2>&1 & echo up; sleep 30"
    launcher = subprocess.Popen(
        hardening.launcher(["/bin/sh", "-c", script]),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert launcher.stdout is not None and launcher.stdout.readline() == b"up\n"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=10) == 128 + signal.SIGTERM
        assert launcher.stdout.read() == b""  # every writer of the pipe is gone
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()  # type: ignore[union-attr]
    time.sleep(3)
    assert not marker.exists()


@linux
async def test_where_a_cgroup_can_be_made_the_command_runs_in_its_own(tool: BashTool) -> None:
    """...and the cgroup is gone after the call."""
    base = hardening._cgroup2_base()
    if base is None:
        pytest.skip("no writable cgroup v2 here: the subreaper alone does the work")
    out = await tool.execute({"command": "grep '^0::' /proc/self/cgroup"}, CALL)
    name = out.content.rpartition("/")[2]
    assert name.startswith("rousseau-bash-"), out.content
    assert not (base / name).exists()
