"""iMessage specifics beyond the conformance suite: the persisted cursor, the password,
the AppleScript and Private API modes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from rousseau.agent import TransportAuthError
from rousseau.media import BlobStore, MediaIntake
from rousseau.messages import Inbound, MemoryKeyValue, Outbound
from rousseau.transports.imessage import IMessageError, IMessageTransport
from tests.fakes.bluebubbles import PASSWORD
from tests.helpers import taken_side_by_side
from tests.transports.harness_imessage import IMessageHarness
from tests.transports.test_conformance import act, daemon, delivered, settle

pytestmark = pytest.mark.anyio


@pytest.fixture
def harness() -> IMessageHarness:
    made = IMessageHarness()
    yield made  # type: ignore[misc]
    made.close()


async def test_history_before_the_first_start_is_not_answered(
    harness: IMessageHarness, tmp_path: Path
) -> None:
    old = int(time.time() * 1000) - 60_000
    harness.server.receive("an old message", sender=harness.owner, chat=harness.dm_chat, at=old)
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.dm, "new")
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.text == "echo: new" and len(provider.requests) == 1


async def test_restart_neither_replays_nor_skips(harness: IMessageHarness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path):
        await act(harness.dm, "before")
        await delivered(harness, 1)
    await act(harness.dm, "while it was down")
    async with daemon(harness, tmp_path) as (_, provider):
        await delivered(harness, 2)
        await settle()
    assert [d.text for d in harness.delivered()] == ["echo: before", "echo: while it was down"]
    assert len(provider.requests) == 1


async def test_messages_in_the_same_millisecond_are_all_taken(
    harness: IMessageHarness, tmp_path: Path
) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        at = int(time.time() * 1000) + 500
        for text in ("one", "two", "three"):
            chat = f"iMessage;-;{harness.owner}"
            harness.server.receive(text, sender=harness.owner, chat=chat, at=at)
        await delivered(harness, 3)
        await settle()
    assert sorted(r.messages[-1].text for r in provider.requests) == ["one", "three", "two"]


async def test_attachments_and_reactions_without_text_are_skipped(
    harness: IMessageHarness, tmp_path: Path
) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.dm, "\ufffc")
        await act(harness.dm, "and a caption \ufffc")
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.text == "echo: and a caption" and len(provider.requests) == 1


async def test_applescript_mode_sends_plainly(tmp_path: Path) -> None:
    harness = IMessageHarness(private_api=False)
    try:
        async with daemon(harness, tmp_path):
            await act(harness.dm, "slow, please")
            await delivered(harness, 1)
        [sent] = harness.server.sent
        assert sent["method"] == "apple-script" and "selectedMessageGuid" not in sent
        assert harness.server.typing == []
    finally:
        harness.close()


async def test_private_api_replies_to_the_message(harness: IMessageHarness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path):
        await act(harness.dm, "quote me")
        await delivered(harness, 1)
    assert harness.last is not None
    [sent] = harness.server.sent
    assert sent["method"] == "private-api" and sent["selectedMessageGuid"] == harness.last["guid"]


async def test_check_and_a_wrong_password(harness: IMessageHarness) -> None:
    good = IMessageTransport(harness.server.url, PASSWORD)
    try:
        assert "BlueBubbles 1.9.9" in await good.check()
    finally:
        await good.aclose()
    bad = IMessageTransport(harness.server.url, "wrong")
    try:
        with pytest.raises(TransportAuthError, match=r"^imessage\.password: .*HTTP 401") as caught:
            await bad.check()
        assert "wrong" not in str(caught.value).replace("wrong password", "")
    finally:
        await bad.aclose()


async def test_unreachable_server_is_one_clear_error() -> None:
    transport = IMessageTransport("http://127.0.0.1:1", PASSWORD)
    try:
        with pytest.raises(IMessageError, match="ConnectError"):
            await transport.check()
    finally:
        await transport.aclose()


async def test_a_file_whose_caption_failed_is_not_sent_again(
    harness: IMessageHarness, tmp_path: Path
) -> None:
    """BlueBubbles sends a file without text: the caption goes after it. When only the
    caption fails, the outbox's retry sends the caption, not the file a second time."""
    transport = IMessageTransport(harness.server.url, PASSWORD)
    media = MediaIntake(blobs=BlobStore(folder=tmp_path / "media"), workspace=tmp_path)
    transport.bind_media(media)
    chart = await media.blobs.put(b"\x89PNG chart", media_type="image/png", name="chart.png")
    part = Outbound(
        transport="imessage", chat_id=harness.dm_chat, text="November", attachment=chart
    )
    harness.server.fail_texts = 1
    with pytest.raises(IMessageError):
        await transport.send(part)
    await transport.send(part)
    await transport.aclose()
    [sent] = harness.files_delivered()
    assert (sent.name, sent.data, sent.caption) == ("chart.png", b"\x89PNG chart", "November")
    assert [s["message"] for s in harness.server.sent] == ["November"]


async def test_a_page_takes_its_chats_side_by_side(harness: IMessageHarness) -> None:
    """The messages of one page from two chats are handed over together (so they are stored
    in one commit), not one chat after the other; the cursor then passes both, once."""
    state = MemoryKeyValue()
    at = int(time.time() * 1000)
    await state.set("cursor", json.dumps({"at": at - 1000, "guids": []}))
    chats = (harness.dm_chat, harness.group_chat)
    for text, chat in zip(("one", "two"), chats, strict=True):
        harness.server.receive(text, sender=harness.owner, chat=chat, at=at)
    transport = harness.transport()
    transport.bind_state(state)
    assert sorted(await taken_side_by_side(transport, chats)) == sorted(chats)
    cursor = json.loads(await state.get("cursor") or "{}")
    assert cursor["at"] == at and len(cursor["guids"]) == 2


async def test_a_failed_message_keeps_the_cursor_before_it(harness: IMessageHarness) -> None:
    state = MemoryKeyValue()
    at = int(time.time() * 1000)
    start = json.dumps({"at": at - 1000, "guids": []})
    await state.set("cursor", start)
    harness.server.receive("first", sender=harness.owner, chat=harness.dm_chat, at=at)
    harness.server.receive("second", sender=harness.owner, chat=harness.group_chat, at=at + 1)
    taken: list[str] = []

    async def fails_first(inbound: Inbound) -> None:
        if inbound.text == "first":
            raise OSError("the disk is full")
        taken.append(inbound.text)

    transport = harness.transport()
    transport.bind_state(state)
    try:
        with anyio.fail_after(30), pytest.raises(OSError, match="disk is full"):
            await transport.run(fails_first)
    finally:
        await transport.aclose()
    assert taken == ["second"], "the other chat was taken"
    assert await state.get("cursor") == start, "both are polled again (the second, a duplicate)"
