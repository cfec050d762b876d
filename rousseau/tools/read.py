"""read: a text file from the workspace, numbered like `cat -n`, capped at 200 KB."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool, looks_binary

MAX_OUTPUT = 200 * 1024
MAX_LINE = 4000


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
        path = self.workspace.resolve(input["path"])
        offset = int(input.get("offset", 1))
        limit = input.get("limit")
        return await anyio.to_thread.run_sync(_read, path, input["path"], offset, limit)


def _read(path: Path, shown: str, offset: int, limit: int | None) -> ToolOutput:
    if not path.exists():
        return ToolOutput(content=f"no such file: {shown}", is_error=True)
    if not path.is_file():
        return ToolOutput(content=f"not a regular file: {shown}", is_error=True)
    out: list[str] = []
    size = 0
    last = offset - 1
    with path.open("rb") as f:
        if looks_binary(f.read(8192)):
            return ToolOutput(content=f"refusing to read binary file: {shown}", is_error=True)
        f.seek(0)
        for number, raw in enumerate(f, start=1):
            if number < offset:
                continue
            if limit is not None and number >= offset + limit:
                break
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if len(text) > MAX_LINE:
                text = text[:MAX_LINE] + f" [... line cut at {MAX_LINE} characters]"
            line = f"{number:6}\t{text}\n"
            if size + len(line) > MAX_OUTPUT:
                out.append(f"[output capped at 200 KB; continue with offset={number}]\n")
                break
            out.append(line)
            size += len(line)
            last = number
    if not out:
        if last < offset and offset > 1:
            return ToolOutput(content=f"{shown} has fewer than {offset} lines")
        return ToolOutput(content=f"{shown} is empty")
    return ToolOutput(content="".join(out))
