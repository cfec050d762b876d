"""edit: replace one exact, unique occurrence of a string in a workspace file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool, looks_binary


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
        path = self.workspace.resolve(input["path"])
        return await anyio.to_thread.run_sync(_edit, path, input["path"], old, new)


def _edit(path: Path, shown: str, old: str, new: str) -> ToolOutput:
    if not path.is_file():
        return ToolOutput(content=f"no such file: {shown}", is_error=True)
    data = path.read_bytes()
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
            content=f"old_string occurs {count} times in {shown}; add context to make it unique",
            is_error=True,
        )
    path.write_bytes(text.replace(old, new, 1).encode("utf-8"))
    return ToolOutput(content=f"edited {shown}")
