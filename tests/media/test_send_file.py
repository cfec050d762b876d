"""The send_file tool on its own: what it queues for the chat, and the error results the
model reads when it cannot send."""

from __future__ import annotations

from pathlib import Path

import pytest

from rousseau.agent import Attachment, ToolCall
from rousseau.media import BlobStore
from rousseau.media.tool import SendFileTool
from rousseau.tools.fs import Workspace
from rousseau.transports.base import Inbound, current_inbound, outgoing_files

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t1")


def tool(tmp_path: Path, limits: dict[str, int] | None = None) -> SendFileTool:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "chart.png").write_bytes(b"\x89PNG" + bytes(60))
    limits = {"telegram": 1000} if limits is None else limits
    return SendFileTool(Workspace(tmp_path / "ws"), BlobStore(folder=tmp_path / "media"), limits)


def in_chat(transport: str = "telegram") -> list[tuple[Attachment, str]]:
    current_inbound.set(
        Inbound(transport=transport, chat_id="42", sender_id="42", message_id="1", text="hi")
    )
    queued: list[tuple[Attachment, str]] = []
    outgoing_files.set(queued)
    return queued


async def test_a_file_is_stored_and_queued_with_its_caption(tmp_path: Path) -> None:
    queued = in_chat()
    out = await tool(tmp_path).execute({"path": "chart.png", "caption": "Nov"}, CALL)
    assert not out.is_error and "chart.png (64 bytes) will be sent" in out.content
    [(attachment, caption)] = queued
    assert (attachment.media_type, attachment.name, attachment.size, caption) == (
        "image/png",
        "chart.png",
        64,
        "Nov",
    )
    assert BlobStore(folder=tmp_path / "media").read_sync(attachment.sha256) is not None


@pytest.mark.parametrize(
    ("path", "limits", "transport", "error"),
    [
        ("chart.png", {"telegram": 10}, "telegram", "chart.png is 64 bytes; this chat takes"),
        ("chart.png", {}, "email", "this chat (email) cannot receive files"),
        ("../outside.txt", None, "telegram", "outside the workspace"),
        ("missing.png", None, "telegram", "missing.png"),
    ],
)
async def test_what_cannot_be_sent_is_an_error_result(
    tmp_path: Path, path: str, limits: dict[str, int] | None, transport: str, error: str
) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    queued = in_chat(transport)
    out = await tool(tmp_path, limits).execute({"path": path}, CALL)
    assert out.is_error and error in out.content, out.content
    assert queued == []


async def test_outside_a_chat_nothing_is_sent(tmp_path: Path) -> None:
    current_inbound.set(None)
    outgoing_files.set(None)
    out = await tool(tmp_path).execute({"path": "chart.png"}, CALL)
    assert out.is_error and out.content == "send_file works only in a chat"
