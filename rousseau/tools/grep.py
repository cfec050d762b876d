"""grep: search workspace files with a regular expression.

RE2 matches in time linear in the text, so no pattern can pin a thread (Python's `re`
backtracks: `(a+)+$` on forty a's and a "!" never returns). Folders are walked by
descriptor without following symlinks; only regular files with one link are read, opened
without blocking, so a FIFO is skipped rather than waited on. A time limit stops a search
of a huge tree with what it found so far.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import TOOL_DEADLINE, WorkspaceTool, looks_binary, run_in_thread
from rousseau.tools.fs import Workspace, WorkspaceError, check_regular

MAX_MATCHES = 200
MAX_FILE_SIZE = 4 * 1024 * 1024
MAX_LINE = 500
MAX_DEPTH = 64
"""Folder levels below the start that are searched (each holds a descriptor while open)."""
TIME_LIMIT = 30.0
"""Seconds of searching before grep stops and answers with what it found."""
SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Pattern(Protocol):
    """A compiled RE2 expression, as far as grep uses it."""

    def search(self, text: bytes) -> object | None: ...


class GrepTool(WorkspaceTool):
    """`grep {pattern, path?, include?, ignore_case?}`: regex search over the workspace's files."""

    name = "grep"
    description = (
        "Search files in the workspace for a regular expression (RE2 syntax: Python's "
        "without backreferences or lookaround). Prints path:line:text for at most 200 "
        "matches. Skips binary files, files over 4 MiB, symlinks, .git, node_modules, .venv "
        "and __pycache__."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression"},
            "path": {"type": "string", "description": "File or folder to search (default: all)"},
            "include": {
                "type": "string",
                "description": "Only files matching this glob, e.g. *.py",
            },
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        workspace: Workspace,
        *,
        deadline: float = TOOL_DEADLINE,
        time_limit: float = TIME_LIMIT,
    ) -> None:
        super().__init__(workspace, deadline=deadline)
        self.time_limit = time_limit

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        try:
            regex = compile_pattern(input["pattern"], bool(input.get("ignore_case")))
        except WorkspaceError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        search = _Search(regex=regex, include=input.get("include") or "", limit=self.time_limit)
        return await run_in_thread(search.run, self.workspace, input.get("path") or ".")


def compile_pattern(pattern: str, ignore_case: bool) -> Pattern:
    """The RE2 expression for `pattern`; WorkspaceError saying why when there is none."""
    # Imported at the first search: 1.5 MiB and 2 ms a daemon that never greps need not pay.
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False  # RE2 would print every bad pattern on stderr
    options.case_sensitive = not ignore_case
    try:
        regex: Pattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        try:
            re.compile(pattern)
        except re.error as python:
            raise WorkspaceError(f"invalid pattern: {python}") from None
        raise WorkspaceError(
            f"pattern not supported: {reason} (grep uses RE2 syntax: no backreferences, "
            r"lookahead or lookbehind; \z for the end of a line)"
        ) from None
    finally:
        re2.purge()  # its cache could hold 128 compiled patterns of up to 8 MiB each
    return regex


@dataclass(kw_only=True)
class _Search:
    """One grep call: the walk, the matches, the notes."""

    regex: Pattern
    include: str
    limit: float
    lines: list[str] = field(default_factory=list)
    hard_links: int = 0
    too_deep: int = 0
    stopped: str = ""
    _until: float = 0.0

    def run(self, workspace: Workspace, path: str) -> ToolOutput:
        self._until = time.monotonic() + self.limit
        opened = workspace.open(path, os.O_RDONLY)
        try:
            if stat.S_ISDIR(opened.stat.st_mode):
                self._folder(opened.fd, opened.relative, "", 0)
            else:
                check_regular(opened.stat, path)
                self._search(opened.fd, opened.relative)
        finally:
            os.close(opened.fd)
        return ToolOutput(content="\n".join(self._report()))

    def _report(self) -> list[str]:
        lines = self.lines or ["no matches"]
        if self.stopped:
            lines.append(self.stopped)
        if self.hard_links:
            lines.append(f"[skipped {self.hard_links} file(s) with more than one hard link]")
        if self.too_deep:
            lines.append(f"[skipped {self.too_deep} folder(s) nested over {MAX_DEPTH} deep]")
        return lines

    def _folder(self, fd: int, shown: str, below: str, depth: int) -> None:
        """Search the files of the folder `fd`, then its subfolders, in name order."""
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if self.stopped:
                return
            if not entry.is_file(follow_symlinks=False):
                continue
            if self.include and not (
                fnmatch.fnmatch(entry.name, self.include)
                or fnmatch.fnmatch(below + entry.name, self.include)
            ):
                continue
            self._file(fd, entry.name, _join(shown, entry.name))
        for entry in entries:
            if self.stopped:
                return
            if entry.name in SKIP_DIRS or not entry.is_dir(follow_symlinks=False):
                continue
            if depth >= MAX_DEPTH:
                self.too_deep += 1
                continue
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a symlink: not followed
            try:
                name = _join(shown, entry.name)
                self._folder(child, name, f"{below}{entry.name}/", depth + 1)
            finally:
                os.close(child)

    def _file(self, folder: int, name: str, shown: str) -> None:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
        except OSError:
            return  # gone, a symlink by now, a FIFO nobody writes to, unreadable
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_SIZE:
                return
            if st.st_nlink > 1:
                self.hard_links += 1
                return
            self._search(fd, shown)
        except OSError:
            return
        finally:
            os.close(fd)

    def _out_of_time(self) -> bool:
        if time.monotonic() <= self._until:
            return False
        self.stopped = f"[stopped after {self.limit:g} s; narrow the search with path or include]"
        return True

    def _search(self, fd: int, shown: str) -> None:
        if self._out_of_time():
            return
        data = _read_at_most(fd, MAX_FILE_SIZE + 1)
        if len(data) > MAX_FILE_SIZE or looks_binary(data[:8192]):
            return
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        for number, line in enumerate(lines, start=1):
            if number % 4096 == 0 and self._out_of_time():
                return
            if self.regex.search(line) is None:
                continue
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            if len(text) > MAX_LINE:
                text = text[:MAX_LINE] + " [...]"
            self.lines.append(f"{shown}:{number}:{text}")
            if len(self.lines) >= MAX_MATCHES:
                self.stopped = f"[stopped at {MAX_MATCHES} matches; narrow the search]"
                return


def _join(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
