"""write: create or replace a file in the workspace, making parent folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool


class WriteTool(WorkspaceTool):
    """`write {path, content}`: create or replace a file, making its folders."""

    name = "write"
    description = (
        "Create or overwrite a file in the workspace with the given content. "
        "Parent folders are created as needed."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path in the workspace"},
            "content": {"type": "string", "description": "The whole new content of the file"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        path = self.workspace.resolve(input["path"])
        if path == self.workspace.root:
            return ToolOutput(content="path names the workspace itself", is_error=True)
        return await anyio.to_thread.run_sync(_write, path, input["path"], input["content"])


def _write(path: Path, shown: str, content: str) -> ToolOutput:
    if path.is_dir():
        return ToolOutput(content=f"{shown} is a directory", is_error=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    path.write_bytes(data)
    return ToolOutput(content=f"wrote {len(data)} bytes to {shown}")
