"""grep: search workspace files with a regular expression."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import OutsideWorkspaceError, WorkspaceTool, looks_binary

MAX_MATCHES = 200
MAX_FILE_SIZE = 4 * 1024 * 1024
MAX_LINE = 500
SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})


class GrepTool(WorkspaceTool):
    """`grep {pattern, path?, include?, ignore_case?}`: regex search over the workspace's files."""

    name = "grep"
    description = (
        "Search files in the workspace for a regular expression (Python syntax). Prints "
        "path:line:text for at most 200 matches. Skips binary files, files over 4 MiB, "
        ".git, node_modules, .venv and __pycache__."
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

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        flags = re.IGNORECASE if input.get("ignore_case") else 0
        try:
            regex = re.compile(input["pattern"], flags)
        except re.error as exc:
            return ToolOutput(content=f"invalid pattern: {exc}", is_error=True)
        start = self.workspace.resolve(input.get("path") or ".")
        if not start.exists():
            return ToolOutput(content=f"no such file or folder: {input.get('path')}", is_error=True)
        include = input.get("include") or ""
        return await anyio.to_thread.run_sync(self._search, regex, start, include)

    def _search(self, regex: re.Pattern[str], start: Path, include: str) -> ToolOutput:
        lines: list[str] = []
        for path in self._files(start, include):
            try:
                if path.stat().st_size > MAX_FILE_SIZE:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if looks_binary(data[:8192]):
                continue
            shown = self.workspace.relative(path)
            text = data.decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    if len(line) > MAX_LINE:
                        line = line[:MAX_LINE] + " [...]"
                    lines.append(f"{shown}:{number}:{line}")
                    if len(lines) >= MAX_MATCHES:
                        lines.append(f"[stopped at {MAX_MATCHES} matches; narrow the search]")
                        return ToolOutput(content="\n".join(lines))
        return ToolOutput(content="\n".join(lines) if lines else "no matches")

    def _files(self, start: Path, include: str) -> Iterator[Path]:
        if start.is_file():
            yield start
            return
        for folder, dirs, files in os.walk(start):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(files):
                path = Path(folder) / name
                if include:
                    rel = str(path.relative_to(start))
                    if not (fnmatch.fnmatch(name, include) or fnmatch.fnmatch(rel, include)):
                        continue
                if path.is_symlink():
                    try:
                        path = self.workspace.resolve(str(path))
                    except OutsideWorkspaceError:
                        continue
                    if not path.is_file():
                        continue
                yield path
