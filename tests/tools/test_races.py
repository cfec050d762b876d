"""The file tools cannot be raced out of the workspace: a directory swapped for a symlink to
an outside folder while the tool runs, and hard links to outside files, lead nowhere."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rousseau.agent import ToolCall
from rousseau.tools import EditTool, GrepTool, ReadTool, Workspace, WorkspaceError, WriteTool
from rousseau.tools.read import read_file
from rousseau.tools.write import write_file

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")

RACE_ROUNDS = 20_000
"""Calls of a tool's core per race test; the old check-then-open code let about 1 in 30
escape."""
EXECUTE_ROUNDS = 1_000
"""The same race through the async tools (each call hops to a thread, so fewer)."""

# Swaps the directory `d` and the symlink `evil` (to an outside folder) as fast as it can:
# atomically with renameat2(RENAME_EXCHANGE) where the file system has it, else by renames.
_SWAPPER = r"""
import ctypes, os, sys
d, evil = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
exchange = getattr(libc, "renameat2", None)
atomic = exchange is not None and exchange(-100, d.encode(), -100, evil.encode(), 2) == 0
print("ready", flush=True)
while True:
    if atomic:
        exchange(-100, d.encode(), -100, evil.encode(), 2)
    else:
        os.rename(d, d + ".real")
        os.rename(evil, d)
        os.rename(d, evil)
        os.rename(d + ".real", d)
"""


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


@pytest.fixture
def swapping(ws: Path, outside: Path) -> Iterator[None]:
    """ws/d is a directory one moment and a symlink to `outside` the next, until the test ends."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text("OUTSIDE\n")
    (ws / "evil").symlink_to(outside)
    swapper = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(ws / "d"), str(ws / "evil")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        swapper.stdout.close()  # type: ignore[union-attr]


@pytest.mark.usefixtures("swapping")
def test_read_never_returns_an_outside_file_while_a_symlink_races(ws: Path) -> None:
    workspace = Workspace(ws)
    escapes = inside = refused = 0
    for _ in range(RACE_ROUNDS):
        try:
            out = read_file(workspace, "d/f.txt", 1, None)
        except WorkspaceError:
            refused += 1
            continue
        escapes += "OUTSIDE" in out.content
        inside += out.content == "     1\tinside\n"
    assert escapes == 0, f"{escapes} of {RACE_ROUNDS} reads returned the outside file"
    assert inside and refused, "the swap never raced the tool"


@pytest.mark.usefixtures("swapping")
def test_write_never_creates_an_outside_file_while_a_symlink_races(ws: Path, outside: Path) -> None:
    workspace = Workspace(ws)
    refused = 0
    for i in range(RACE_ROUNDS):
        try:
            write_file(workspace, f"d/new{i}.txt", "x")
        except WorkspaceError:
            refused += 1
    escapes = [p.name for p in outside.iterdir() if p.name != "f.txt"]
    assert escapes == [], f"{len(escapes)} of {RACE_ROUNDS} writes created a file outside"
    assert 0 < refused < RACE_ROUNDS, "the swap never raced the tool"


@pytest.mark.usefixtures("swapping")
async def test_the_tools_do_not_escape_through_execute_either(ws: Path, outside: Path) -> None:
    workspace = Workspace(ws)
    read, write = ReadTool(workspace), WriteTool(workspace)
    for i in range(EXECUTE_ROUNDS):
        out = await read.execute({"path": "d/f.txt"}, CALL)
        assert "OUTSIDE" not in out.content
        out = await write.execute({"path": f"d/w{i}.txt", "content": "x"}, CALL)
        assert out.is_error or "wrote 1 bytes" in out.content, out.content
    assert [p.name for p in outside.iterdir()] == ["f.txt"]


# -- hard links -------------------------------------------------------------------------------


@pytest.fixture
def hard_link(ws: Path, outside: Path) -> Path:
    """ws/h.txt is a second name of outside/secret.txt (as `ln` in bash would make it)."""
    secret = outside / "secret.txt"
    secret.write_text("SECRET = 1\n")
    os.link(secret, ws / "h.txt")
    return secret


@pytest.mark.parametrize(
    ("tool", "input"),
    [
        (ReadTool, {"path": "h.txt"}),
        (EditTool, {"path": "h.txt", "old_string": "1", "new_string": "2"}),
        (WriteTool, {"path": "h.txt", "content": "overwritten"}),
    ],
)
async def test_a_hard_linked_file_is_refused(
    ws: Path, hard_link: Path, tool: type[ReadTool], input: dict[str, Any]
) -> None:
    out = await tool(Workspace(ws)).execute(input, CALL)
    assert out.is_error
    assert "has 2 hard links; refused (it may be a file outside the workspace)" in out.content
    assert "SECRET" not in out.content
    assert hard_link.read_text() == "SECRET = 1\n"


async def test_grep_skips_hard_linked_files(ws: Path, hard_link: Path) -> None:
    (ws / "plain.txt").write_text("SECRET in the open\n")
    out = await GrepTool(Workspace(ws)).execute({"pattern": "SECRET"}, CALL)
    assert out.content.splitlines()[0] == "plain.txt:1:SECRET in the open"
    assert "SECRET = 1" not in out.content
