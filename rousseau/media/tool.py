"""The `send_file` tool: the model attaches a file from the workspace to its answer in the
current chat (a chart it drew, a CSV it wrote). Like any tool, each call goes through the
approver first; the file goes out through the outbox with the answer, exactly once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from io import FileIO
from typing import Any, ClassVar

from rousseau.agent import ToolCall, ToolOutput
from rousseau.media import BlobStore, media_type_of
from rousseau.messages import outgoing_files
from rousseau.tools.base import WorkspaceTool, run_in_thread
from rousseau.tools.fs import Workspace

MAX_CAPTION = 1000
"""Characters of a caption at most (Telegram's limit is 1024)."""


class SendFileTool(WorkspaceTool):
    """`send_file {path, caption?}`: attach a workspace file to the answer in this chat."""

    name = "send_file"
    description = (
        "Send a file from the workspace to the person in this chat, with an optional caption. "
        "Images (PNG, JPEG, GIF, WebP) show inline where the chat app can; anything else "
        "arrives as a document. It goes out with your answer."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path in the workspace"},
            "caption": {"type": "string", "maxLength": MAX_CAPTION},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(
        self, workspace: Workspace, blobs: BlobStore, file_limits: Mapping[str, int]
    ) -> None:
        super().__init__(workspace)
        self.blobs = blobs
        self.file_limits = file_limits
        """The largest file each transport can send, by name; one not named sends none."""

    async def run(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        outgoing = outgoing_files.get()
        if outgoing is None:
            return ToolOutput(content="send_file works only in a chat", is_error=True)
        limit = self.file_limits.get(outgoing.transport)
        if limit is None:
            return ToolOutput(
                content=f"this chat ({outgoing.transport}) cannot receive files", is_error=True
            )
        data, shown = await run_in_thread(self._read, input["path"], limit)
        if data is None:
            return ToolOutput(content=shown, is_error=True)
        name = os.path.basename(shown)
        attachment = await self.blobs.put(data, media_type=media_type_of(name=name), name=name)
        await outgoing.add(attachment, str(input.get("caption", "")))
        return ToolOutput(content=f"{shown} ({len(data):,} bytes) will be sent with your answer")

    def _read(self, path: str, limit: int) -> tuple[bytes | None, str]:
        """The file's bytes and its workspace path, or None and why not."""
        opened = self.workspace.open_file(path, os.O_RDONLY)
        with FileIO(opened.fd, "r") as f:
            if opened.stat.st_size > limit:
                return None, (
                    f"{opened.relative} is {opened.stat.st_size:,} bytes; this chat takes files "
                    f"up to {limit:,} bytes"
                )
            data = f.read(limit + 1)
        if len(data) > limit:
            return None, f"{opened.relative} is larger than {limit:,} bytes"
        return data, opened.relative
