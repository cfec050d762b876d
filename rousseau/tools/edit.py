"""edit: replace one exact, unique occurrence of a string in a workspace file."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool, looks_binary, run_in_thread
from rousseau.tools.fs import Workspace

MAX_SIZE = 10 * 1024 * 1024
"""Largest file edit works on: it holds the file in memory (several times, as text)."""


class EditTool(WorkspaceTool):
    """`edit {path, old_string, new_string}`: replace one exact, unique occurrence in a file."""

    name = "edit"
    description = (
        "Replace old_string with new_string in a workspace file. old_string must occur exactly "
        "once (include surrounding lines to make it unique) and differ from new_string."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path in the workspace"},
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "Exact text to replace",
            },
            "new_string": {"type": "string", "description": "Text to put in its place"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        old, new = input["old_string"], input["new_string"]
        if old == new:
            return ToolOutput(content="old_string and new_string are the same", is_error=True)
        return await run_in_thread(edit_file, self.workspace, input["path"], old, new)


def edit_file(workspace: Workspace, shown: str, old: str, new: str) -> ToolOutput:
    """The tool's work, blocking. A file over MAX_SIZE is refused before any of it is read."""
    opened = workspace.open_file(shown, os.O_RDWR)
    with open(opened.fd, "r+b") as f:
        data = b""
        if opened.stat.st_size <= MAX_SIZE:
            data = f.read(MAX_SIZE + 1)
        if opened.stat.st_size > MAX_SIZE or len(data) > MAX_SIZE:
            size = max(opened.stat.st_size, len(data)) / 1024**2
            return ToolOutput(
                content=f"{shown} is {size:,.1f} MiB, over the {MAX_SIZE // 1024**2} MiB edit "
                "limit; change it with bash (sed, patch) instead",
                is_error=True,
            )
        if looks_binary(data[:8192]):
            return ToolOutput(content=f"refusing to edit binary file: {shown}", is_error=True)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolOutput(content=f"{shown} is not valid UTF-8", is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolOutput(content=f"old_string not found in {shown}", is_error=True)
        if count > 1:
            return ToolOutput(
                content=f"old_string occurs {count} times in {shown}; "
                "add context to make it unique",
                is_error=True,
            )
        f.seek(0)
        f.write(text.replace(old, new, 1).encode("utf-8"))
        f.truncate()
    return ToolOutput(content=f"edited {shown}")
