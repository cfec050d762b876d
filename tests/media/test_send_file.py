"""The send_file tool on its own: what it queues for the chat, and the error results the
model reads when it cannot send."""

from __future__ import annotations

from pathlib import Path

import pytest

from rousseau.agent import Attachment, ToolCall
from rousseau.media import BlobStore
from rousseau.media.tool import SendFileTool
from rousseau.messages import OutgoingFiles, outgoing_files
from rousseau.tools.fs import Workspace

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t1")


def tool(tmp_path: Path, limits: dict[str, int] | None = None) -> SendFileTool:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "chart.png").write_bytes(b"\x89PNG" + bytes(60))
    limits = {"telegram": 1000} if limits is None else limits
    return SendFileTool(Workspace(tmp_path / "ws"), BlobStore(folder=tmp_path / "media"), limits)


def in_chat(transport: str = "telegram") -> list[tuple[Attachment, str]]:
    """As the router sets it up for a turn in a chat of `transport`: what send_file queues."""
    outgoing = OutgoingFiles(transport=transport)
    outgoing_files.set(outgoing)
    return outgoing.files


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
    outgoing_files.set(None)
    out = await tool(tmp_path).execute({"path": "chart.png"}, CALL)
    assert out.is_error and out.content == "send_file works only in a chat"


async def test_a_cron_job_sends_its_files_with_its_reply(tmp_path: Path) -> None:
    from rousseau.agent import Agent, AllowAllApprover, Options, Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
    from rousseau.cron import CronJobs, CronRunner
    from rousseau.state import Store
    from rousseau.state.sqlite_cron import SqliteCronJobs
    from rousseau.tools import Registry

    def answer(request: Request) -> Response:
        if request.messages[-1].tool_results:
            return text_reply("The weekly chart.")
        return tool_reply("send_file", {"path": "chart.png", "caption": "week 48"})

    notified: list[tuple[str, str, str, list[tuple[Attachment, str]]]] = []

    async def notify(
        transport: str, recipient: str, text: str, buttons: object = (), *, files: object = ()
    ) -> int:
        notified.append((transport, recipient, text, list(files)))
        return 1

    with Store(str(tmp_path / "s.db")) as store:
        agent = Agent(
            FunctionProvider(answer),
            Registry([tool(tmp_path)]),
            Options(history=store, approver=AllowAllApprover()),
        )
        jobs = CronJobs(SqliteCronJobs(store))
        job = await jobs.add("weekly", "@weekly", "send the chart", "telegram:42", timezone="UTC")
        outcome = await CronRunner(agent=agent, store=store, notify=notify).run(job)
    assert outcome.status == "ok"
    [(transport, recipient, text, files)] = notified
    assert (transport, recipient, text) == ("telegram", "42", "The weekly chart.")
    [(chart, caption)] = files
    assert (chart.name, caption) == ("chart.png", "week 48")
