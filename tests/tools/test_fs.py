"""How paths are walked beneath the workspace: symlinks that stay inside are followed, every
other way out is refused with a message for the model, and a stuck call is abandoned at
its deadline without keeping the process alive."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools import (
    EditTool,
    GrepTool,
    OutsideWorkspaceError,
    ReadTool,
    Workspace,
    WorkspaceError,
    WorkspaceTool,
    WriteTool,
    run_in_thread,
)

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (tmp_path / "secret.txt").write_text("SECRET\n")
    return root


async def read(ws: Path | Workspace, path: str) -> ToolOutput:
    workspace = ws if isinstance(ws, Workspace) else Workspace(ws)
    return await ReadTool(workspace).execute({"path": path}, CALL)


# -- symlinks and `..` ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    ["a.txt", "./sub/../a.txt", "{ws}/a.txt", "sub/up"],
    ids=["relative", "dotdot-inside", "absolute-inside", "chain"],
)
async def test_symlinks_that_stay_inside_are_followed(ws: Path, target: str) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "up").symlink_to("../a.txt")
    (ws / "link").symlink_to(target.format(ws=ws))
    out = await read(ws, "link")
    assert out == ToolOutput(content="     1\talpha\n")


@pytest.mark.parametrize(
    "target",
    ["../secret.txt", "{ws}/../secret.txt", "{secret}", "sub/../../secret.txt"],
)
async def test_symlinks_that_lead_out_are_refused(ws: Path, target: str) -> None:
    (ws / "sub").mkdir()
    (ws / "link").symlink_to(target.format(ws=ws, secret=ws.parent / "secret.txt"))
    out = await read(ws, "link")
    assert out.is_error and "outside the workspace" in out.content
    assert "SECRET" not in out.content


async def test_dotdot_inside_is_fine_and_past_the_root_is_not(ws: Path) -> None:
    (ws / "sub").mkdir()
    assert (await read(ws, "sub/../a.txt")).content == "     1\talpha\n"
    out = await read(ws, "sub/../../ws/a.txt")
    assert out.is_error and "outside the workspace" in out.content


async def test_a_symlink_loop_is_an_error_not_a_hang(ws: Path) -> None:
    (ws / "one").symlink_to("two")
    (ws / "two").symlink_to("one")
    out = await read(ws, "one")
    assert out.is_error and "too many levels of symbolic links in one" in out.content


async def test_a_dangling_symlink_inside_is_no_such_file_for_read_and_created_by_write(
    ws: Path,
) -> None:
    (ws / "later").symlink_to("made/by/write.txt")
    out = await read(ws, "later")
    assert out.is_error and "no such file" in out.content
    out = await WriteTool(Workspace(ws)).execute({"path": "later", "content": "hi"}, CALL)
    assert not out.is_error
    assert (ws / "made/by/write.txt").read_text() == "hi"


async def test_a_file_in_the_middle_of_a_path_is_named(ws: Path) -> None:
    out = await read(ws, "a.txt/b")
    assert out.is_error and out.content == "a.txt is not a folder (in a.txt/b)"


async def test_the_workspace_itself_and_folders_are_not_files(ws: Path) -> None:
    write = WriteTool(Workspace(ws))
    out = await write.execute({"path": ".", "content": "x"}, CALL)
    assert out == ToolOutput(content="path names the workspace itself", is_error=True)
    (ws / "dir").mkdir()
    out = await write.execute({"path": "dir", "content": "x"}, CALL)
    assert out == ToolOutput(content="not a regular file: dir is a folder", is_error=True)
    out = await read(ws, "dir")
    assert out == ToolOutput(content="not a regular file: dir is a folder", is_error=True)


async def test_an_absolute_path_through_a_symlinked_root_is_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("alpha\n")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    workspace = Workspace(tmp_path / "alias")
    for spelling in (tmp_path / "alias" / "a.txt", tmp_path / "real" / "a.txt"):
        assert (await read(workspace, str(spelling))).content == "     1\talpha\n"


def test_open_file_hands_back_a_checked_descriptor(ws: Path) -> None:
    opened = Workspace(ws).open_file("a.txt", os.O_RDONLY)
    try:
        assert opened.relative == "a.txt" and stat.S_ISREG(opened.stat.st_mode)
        assert os.get_blocking(opened.fd), "O_NONBLOCK is for the open only"
        assert os.read(opened.fd, 100) == b"alpha\n"
    finally:
        os.close(opened.fd)
    with pytest.raises(OutsideWorkspaceError):
        Workspace(ws).open_file("../secret.txt", os.O_RDONLY)
    with pytest.raises(WorkspaceError, match="NUL"):
        Workspace(ws).open_file("a\x00b", os.O_RDONLY)


# -- write and edit keep the file -------------------------------------------------------------


async def test_write_and_edit_change_the_file_in_place(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o750)
    inode = script.stat().st_ino
    out = await EditTool(Workspace(ws)).execute(
        {"path": "run.sh", "old_string": "one", "new_string": "two"}, CALL
    )
    assert not out.is_error
    out = await WriteTool(Workspace(ws)).execute({"path": "run.sh", "content": "echo 3\n"}, CALL)
    assert not out.is_error
    assert script.read_text() == "echo 3\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750 and script.stat().st_ino == inode


# -- read streams -----------------------------------------------------------------------------


async def test_a_long_line_is_cut_and_the_next_one_still_read(ws: Path) -> None:
    (ws / "long.txt").write_text("x" * 50_000 + "\nsecond\n" + "😀" * 4000 + "\n")
    out = await read(ws, "long.txt")
    first, second, third = out.content.splitlines()
    assert first == "     1\t" + "x" * 4000 + " [... line cut at 4000 characters]"
    assert second == "     2\tsecond"
    assert third == "     3\t" + "😀" * 4000, "a line of exactly 4000 characters is whole"
    out = await ReadTool(Workspace(ws)).execute({"path": "long.txt", "offset": 2}, CALL)
    assert out.content.startswith("     2\tsecond\n")


# -- grep -------------------------------------------------------------------------------------


async def test_grep_names_patterns_re2_does_not_support(ws: Path) -> None:
    grep = GrepTool(Workspace(ws))
    for pattern in (r"(a)\1", "foo(?=bar)", "(?<!x)y"):
        out = await grep.execute({"pattern": pattern}, CALL)
        assert out.is_error and out.content.startswith("pattern not supported: "), out.content
        assert "RE2 syntax" in out.content
    out = await grep.execute({"pattern": "[a-"}, CALL)
    assert out.is_error and out.content.startswith("invalid pattern: ")


async def test_grep_does_not_walk_through_symlinks(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("alpha in sub\n")
    (ws / "sub-link").symlink_to("sub")
    (ws / "a-link").symlink_to("a.txt")
    (ws / "root-link").symlink_to(".")
    out = await GrepTool(Workspace(ws)).execute({"pattern": "alpha"}, CALL)
    assert out.content == "a.txt:1:alpha\nsub/b.txt:1:alpha in sub"
    out = await GrepTool(Workspace(ws)).execute({"pattern": "alpha", "path": "sub-link"}, CALL)
    assert out.content == "sub/b.txt:1:alpha in sub", "a symlink named as the path is followed"


async def test_grep_stops_at_its_time_limit_with_what_it_found(ws: Path) -> None:
    grep = GrepTool(Workspace(ws), time_limit=0)
    out = await grep.execute({"pattern": "alpha"}, CALL)
    assert not out.is_error
    assert out.content.endswith("[stopped after 0 s; narrow the search with path or include]")


# -- deadlines --------------------------------------------------------------------------------


class Stuck(WorkspaceTool):
    """A file tool whose call never returns, like a read from a FIFO nobody writes to."""

    name = "stuck"
    description = "Never returns."
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - a test's one tool

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        await run_in_thread(time.sleep, 30)
        return ToolOutput(content="woke up")


async def test_a_stuck_call_is_abandoned_at_the_deadline(ws: Path) -> None:
    out = await Stuck(Workspace(ws), deadline=0.2).execute({}, CALL)
    assert out == ToolOutput(
        content="stuck gave up after 0.2 s and was abandoned (a slow or stuck file system?)",
        is_error=True,
    )
    stuck = [t for t in threading.enumerate() if t.name == "rousseau-tool-sleep"]
    assert stuck and all(t.daemon for t in stuck)


_EXIT_AFTER_ABANDONING = r"""
import sys, time
import anyio
from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools import Workspace, WorkspaceTool, run_in_thread

class Stuck(WorkspaceTool):
    name, description, input_schema = "stuck", "Never returns.", {"type": "object"}

    async def run(self, input, call):
        await run_in_thread(time.sleep, 3600)
        return ToolOutput(content="woke up")

call = ToolCall(session_id="s", tool_use_id="t")
print(anyio.run(Stuck(Workspace(sys.argv[1]), deadline=0.2).execute, {}, call).content)
"""


def test_an_abandoned_call_does_not_keep_the_process_alive(ws: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_AFTER_ABANDONING, str(ws)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "gave up after 0.2 s" in done.stdout


async def test_run_in_thread_returns_and_raises_like_the_function() -> None:
    assert await run_in_thread(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await run_in_thread(divmod, 1, 0)
    with anyio.move_on_after(0.05) as scope:
        await run_in_thread(time.sleep, 0.5)  # finishing later, unawaited, troubles nobody
    assert scope.cancelled_caught
