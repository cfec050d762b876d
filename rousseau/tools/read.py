"""read: a text file from the workspace, numbered like `cat -n`, capped at 200 KB.

The file is streamed: a line is held only up to a cap and the rest of it skipped in chunks,
so a 1.5 GB file without a newline costs a few hundred kilobytes, not gigabytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from io import BufferedReader, FileIO
from typing import Any, ClassVar

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool, looks_binary, run_in_thread
from rousseau.tools.fs import Workspace

MAX_OUTPUT = 200 * 1024
MAX_LINE = 4000
MAX_LINE_BYTES = 4 * MAX_LINE
"""Bytes of a line kept: enough for MAX_LINE characters of any UTF-8 text."""
_CHUNK = 1024 * 1024


class ReadTool(WorkspaceTool):
    """`read {path, offset?, limit?}`: a text file's lines, numbered, capped."""

    name = "read"
    description = (
        "Read a text file in the workspace. Lines come numbered (number, tab, text). "
        "Use offset (first line, 1-based) and limit (number of lines) for large files; "
        "output stops at 200 KB with a note saying where to continue."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path in the workspace"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read"},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        offset = int(input.get("offset", 1))
        limit = input.get("limit")
        return await run_in_thread(read_file, self.workspace, input["path"], offset, limit)


def read_file(workspace: Workspace, shown: str, offset: int, limit: int | None) -> ToolOutput:
    """The tool's work, blocking: `shown` numbered from line `offset`, at most `limit` lines.
    Raises WorkspaceError for a path or file it refuses."""
    opened = workspace.open_file(shown, os.O_RDONLY)
    with BufferedReader(FileIO(opened.fd, "r"), 64 * 1024) as f:
        if looks_binary(f.peek(8192)[:8192]):
            return ToolOutput(content=f"refusing to read binary file: {shown}", is_error=True)
        out: list[str] = []
        size = 0
        last = offset - 1
        for number, (raw, cut) in enumerate(_lines(f), start=1):
            if number < offset:
                continue
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if cut or len(text) > MAX_LINE:
                text = text[:MAX_LINE] + f" [... line cut at {MAX_LINE} characters]"
            line = f"{number:6}\t{text}\n"
            if size + len(line) > MAX_OUTPUT:
                out.append(f"[output capped at 200 KB; continue with offset={number}]\n")
                break
            out.append(line)
            size += len(line)
            last = number
            if limit is not None and number == offset + limit - 1:
                break  # before the next line: the rest of a long one need not be skipped
    if not out:
        if last < offset and offset > 1:
            return ToolOutput(content=f"{shown} has fewer than {offset} lines")
        return ToolOutput(content=f"{shown} is empty")
    return ToolOutput(content="".join(out))


def _lines(f: BufferedReader[FileIO]) -> Iterator[tuple[bytes, bool]]:
    """Each line's first MAX_LINE_BYTES bytes, and whether more of it was dropped. The rest
    of a long line is skipped in chunks only when the next line is asked for."""
    while True:
        raw = f.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) < MAX_LINE_BYTES:
            yield raw, False
            continue
        after = f.peek(1)[:1]
        if after in (b"", b"\n"):
            f.read(len(after))
            yield raw, False
            continue
        yield raw, True
        while True:
            rest = f.readline(_CHUNK)
            if not rest or rest.endswith(b"\n"):
                break
