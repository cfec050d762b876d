"""write: create or replace a file in the workspace, making parent folders."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import WorkspaceTool, run_in_thread
from rousseau.tools.fs import Workspace


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
        return await run_in_thread(write_file, self.workspace, input["path"], input["content"])


def write_file(workspace: Workspace, shown: str, content: str) -> ToolOutput:
    """The tool's work, blocking. The file is opened (or created) beneath the workspace and
    checked before it is truncated: a FIFO or a hard-linked file is refused untouched."""
    data = content.encode("utf-8")
    opened = workspace.open_file(shown, os.O_WRONLY | os.O_CREAT, create_parents=True)
    with open(opened.fd, "wb") as f:
        f.truncate(0)
        f.write(data)
    return ToolOutput(content=f"wrote {len(data)} bytes to {shown}")
