"""The file tools never hang and stay bounded in memory: FIFOs are refused or skipped, grep's
regex engine runs in linear time, read streams a huge line, edit refuses a huge file.

Calls that used to hang run in a child process, so a regression fails the test instead of
pinning a thread of the test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rousseau.agent import ToolCall
from rousseau.tools import EditTool, Workspace

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")
HANG = 30.0
"""Seconds after which a child process counts as hung (the calls take milliseconds)."""

_CALL_IN_CHILD = r"""
import json, sys
import anyio
from rousseau.agent import ToolCall
from rousseau.tools import builtin_registry

async def main():
    tool = builtin_registry(sys.argv[1]).get(sys.argv[2])
    out = await tool.execute(json.loads(sys.argv[3]), ToolCall(session_id="s", tool_use_id="t"))
    print(json.dumps({"content": out.content, "is_error": out.is_error}))

anyio.run(main)
"""


def call_in_child(ws: Path, tool: str, **input: Any) -> dict[str, Any]:
    """Run one tool call in a fresh interpreter; fail if it does not finish (and exit)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CALL_IN_CHILD, str(ws), tool, json.dumps(input)],
            capture_output=True,
            text=True,
            timeout=HANG,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{tool} {input} hung (still running after {HANG:g} s)")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- nothing blocks ---------------------------------------------------------------------------


def test_grep_skips_a_fifo(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "a.txt").write_text("needle\n")
    out = call_in_child(ws, "grep", pattern="needle")
    assert out == {"content": "a.txt:1:needle", "is_error": False}


def test_grep_named_fifo_is_refused(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    out = call_in_child(ws, "grep", pattern="needle", path="pipe")
    assert out["is_error"] and "not a regular file" in out["content"]


def test_grep_catastrophic_regex_returns(ws: Path) -> None:
    (ws / "a.txt").write_text("a" * 40 + "!\n")
    out = call_in_child(ws, "grep", pattern="(a+)+$")
    assert out == {"content": "no matches", "is_error": False}


@pytest.mark.parametrize(
    ("tool", "input"),
    [
        ("write", {"content": "x"}),
        ("read", {}),
        ("edit", {"old_string": "a", "new_string": "b"}),
    ],
)
def test_a_fifo_is_refused_without_blocking(ws: Path, tool: str, input: dict[str, Any]) -> None:
    os.mkfifo(ws / "pipe")
    out = call_in_child(ws, tool, path="pipe", **input)
    assert out["is_error"]
    assert "not a regular file: pipe is a FIFO" in out["content"]


# -- bounded memory ---------------------------------------------------------------------------

# Reads a 1.5 GB line in a child whose address space allows 1 GiB more than it has: the old
# code (the whole line in memory, three times over) fails there with MemoryError.
_READ_HUGE = r"""
import json, resource, sys
import anyio
from rousseau.agent import ToolCall
from rousseau.tools import ReadTool, Workspace

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

async def main():
    tool = ReadTool(Workspace(sys.argv[1]))
    call = ToolCall(session_id="s", tool_use_id="t")
    await tool.execute({"path": "small.txt"}, call)  # warm up: lazy imports, the first thread
    room = status("VmSize") * 1024 + 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (room, resource.getrlimit(resource.RLIMIT_AS)[1]))
    before = status("VmHWM")
    out = await tool.execute({"path": "huge.txt"}, call)
    extra = status("VmHWM") - before
    print(json.dumps({"content": out.content[:200], "tail": out.content[-200:], "extra_kb": extra}))

anyio.run(main)
"""
HUGE = 1536 * 1024 * 1024


def test_read_of_a_huge_single_line_stays_small(ws: Path) -> None:
    (ws / "small.txt").write_text("warm\n")
    with (ws / "huge.txt").open("wb") as f:
        f.write(b"a" * 20_000)
        f.truncate(HUGE)  # sparse: the rest is a hole of NUL bytes, no newline anywhere
    done = subprocess.run(
        [sys.executable, "-c", _READ_HUGE, str(ws)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["content"].startswith("     1\t" + "a" * 100)
    assert "[... line cut at 4000 characters]" in result["tail"]
    assert result["extra_kb"] < 100 * 1024, f"read took {result['extra_kb']} kB more RSS"


async def test_edit_refuses_a_file_over_the_limit_before_reading_it(ws: Path) -> None:
    big = ws / "big.txt"
    with big.open("wb") as f:
        f.write(b"hello world\n" + b"text\n" * 2000)
        f.truncate(1024**3)  # 1 GiB, sparse
    out = await EditTool(Workspace(ws)).execute(
        {"path": "big.txt", "old_string": "hello", "new_string": "bye"}, CALL
    )
    assert out.is_error
    assert "over the 10 MiB edit limit" in out.content
    assert big.stat().st_size == 1024**3
    with big.open("rb") as f:
        assert f.read(12) == b"hello world\n"
