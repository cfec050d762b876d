"""The conformance suite's media scenarios: files in and out of every adapter, through each
platform's own file API on its wire-level fake (or the real Synapse and Dovecot)."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from rousseau.agent import ContentKind, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tools_reply
from rousseau.assembly import blob_store
from rousseau.config import Config, load_config
from rousseau.daemon import Daemon
from rousseau.messages import Outbound
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from tests.fakes.llm import FakeLLMServer, JSONReply
from tests.fakes.telegram import PHOTO
from tests.helpers import serving
from tests.transports.conformance import (
    DeclaresSizes,
    DeliveredFile,
    File,
    Harness,
    TakesFiles,
)
from tests.transports.test_conformance import act, delivered, settle

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
CSV = b"month,total\n11,42\n12,57\n"
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n"
OGG = b"OggS" + bytes(300)
NATIVE_VOICE = {"telegram", "matrix", "whatsapp", "signal", "discord"}
"""The platforms whose voice message rousseau sends as such; the others get an audio file."""
TODAY = datetime.date.today().isoformat()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def takes_files(harness: Harness) -> TakesFiles:
    if not hasattr(harness, "dm_file"):
        pytest.skip(getattr(harness, "no_files", f"the {harness.name} harness cannot send files"))
    return cast(TakesFiles, harness)


def sends_files(harness: Harness) -> TakesFiles:
    """A harness whose adapter sends files too (some platforms take files in only)."""
    if hasattr(harness, "no_files_out"):
        pytest.skip(harness.no_files_out)
    return takes_files(harness)


async def describe(request: Request) -> Response:
    """What the model was given: the text, and each file by kind and name."""
    if request.messages[-1].tool_results:
        return text_reply("Here they are.")
    last = request.messages[-1]
    files = [
        f"{c.kind.value}:{c.attachment.name}" for c in last.content if c.attachment is not None
    ]
    return text_reply(f"got {' '.join(files) or 'no files'}; said: {last.text or '-'}")


def settings_for(tmp: Path, settings: dict[str, Any] | None = None) -> Config:
    path = tmp / "config.yaml"
    path.write_text(json.dumps(settings or {}))
    return load_config(
        str(path),
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        },
    )


@asynccontextmanager
async def daemon(
    harness: Harness, tmp: Path, settings: dict[str, Any] | None = None
) -> AsyncIterator[tuple[Daemon, FunctionProvider]]:
    config = settings_for(tmp, settings)
    provider = FunctionProvider(describe)
    transport = harness.transport()
    async with serving(transport, config, provider, [harness.owner]) as d:
        yield d, provider
    assert not transport.connected


def attachments(provider: FunctionProvider) -> list[Any]:
    [request] = provider.requests
    return [c.attachment for c in request.messages[-1].content if c.attachment is not None]


async def test_a_photo_with_a_caption_reaches_the_model_as_an_image(
    harness: Harness, tmp_path: Path
) -> None:
    files = takes_files(harness)
    async with daemon(harness, tmp_path) as (_, provider):
        await act(
            files.dm_file, "what is on this receipt?", File("receipt.jpg", "image/jpeg", PHOTO)
        )
        [reply] = await delivered(harness, 1)
    [request] = provider.requests
    message = request.messages[-1]
    [image] = [c.attachment for c in message.content if c.kind is ContentKind.IMAGE]
    assert image is not None
    assert (image.sha256, image.media_type) == (sha(PHOTO), "image/jpeg")
    assert message.text.startswith("what is on this receipt?")
    assert reply.chat == harness.dm_chat and reply.text.startswith("got image:")
    [stored] = [p for p in tmp_path.rglob(sha(PHOTO)) if p.is_file()]  # the blob store
    assert stored.read_bytes() == PHOTO


async def test_a_photo_alone_is_answered(harness: Harness, tmp_path: Path) -> None:
    files = takes_files(harness)
    async with daemon(harness, tmp_path) as (_, provider):
        await act(files.dm_file, "", File("photo.png", "image/png", PNG))
        [reply] = await delivered(harness, 1)
    [image] = attachments(provider)
    assert image.sha256 == sha(PNG) and image.is_image
    assert reply.chat == harness.dm_chat and reply.text.startswith("got image:")


async def test_a_pdf_lands_in_the_workspace_and_the_model_is_told_where(
    harness: Harness, tmp_path: Path
) -> None:
    files = takes_files(harness)
    async with daemon(harness, tmp_path) as (_, provider):
        await act(files.dm_file, "summarise this", File("report.pdf", "application/pdf", PDF))
        await delivered(harness, 1)
    [document] = attachments(provider)
    assert document.media_type == "application/pdf"
    assert document.saved_as == f"inbox/{TODAY}/report.pdf"
    assert (tmp_path / "ws" / document.saved_as).read_bytes() == PDF


async def test_a_voice_note_is_transcribed_and_answered_from_the_transcript(
    harness: Harness, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    files = takes_files(harness)
    fake_llm.routes["/v1/audio/transcriptions"] = lambda r: JSONReply(
        {"text": "remind me to buy milk"}
    )
    whisper = {"transcription": {"base_url": fake_llm.url + "/v1", "model": "whisper-test"}}
    async with daemon(harness, tmp_path, {"media": whisper}) as (_, provider):
        voice = File("voice.ogg", "audio/ogg", OGG, voice=True, seconds=42)
        await act(files.dm_file, "", voice)
        [reply] = await delivered(harness, 1)
    uploads = [r for r in fake_llm.requests if r.path == "/v1/audio/transcriptions"]
    assert len(uploads) == 1
    [request] = provider.requests
    assert "remind me to buy milk" in request.messages[-1].text
    assert "[voice note" in request.messages[-1].text
    assert "remind me to buy milk" in reply.text


async def test_a_file_over_the_limit_gets_a_polite_reply_and_no_model_call(
    harness: Harness, tmp_path: Path
) -> None:
    files = takes_files(harness)
    async with daemon(harness, tmp_path, {"media": {"max_bytes": 1000}}) as (_, provider):
        big = File("big.pdf", "application/pdf", PDF + bytes(5000))
        await act(files.dm_file, "read this", big)
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.chat == harness.dm_chat
    assert reply.text.startswith("Sorry, big.pdf is too large")
    assert provider.requests == []
    assert not list((tmp_path / "ws").rglob("big.pdf"))


@pytest.mark.parametrize("declared", [100, None], ids=["declared-100-bytes", "declared-nothing"])
async def test_a_file_larger_than_declared_is_cut_off_and_the_chat_goes_on(
    harness: Harness, tmp_path: Path, declared: int | None
) -> None:
    """64 MB sent for a file said to be 100 bytes (or of no size), the limit 100 kB: the
    download stops at the limit (the platform never gets to send it all), the sender is
    told, nothing of it is kept, and the next message is answered."""
    if not hasattr(harness, "dm_file_declaring"):
        pytest.skip(f"the {harness.name} platform states no size apart from the file")
    if declared is None and hasattr(harness, "no_undeclared"):
        pytest.skip(harness.no_undeclared)
    files = cast(DeclaresSizes, harness)
    size = min(64_000_000, getattr(files, "largest", 64_000_000))
    big = File("big.pdf", "application/pdf", PDF + bytes(size - len(PDF)))
    async with daemon(harness, tmp_path, {"media": {"max_bytes": 100_000}}) as (_, provider):
        await act(files.dm_file_declaring, "read this", big, declared)
        [refused] = await delivered(harness, 1)
        await act(harness.dm, "still there?")
        replies = await delivered(harness, 2)
        await settle()
    assert files.served_whole() is not True  # cut off (None: the fake cannot tell)
    assert refused.chat == harness.dm_chat
    assert refused.text.startswith("Sorry, big.pdf is too large"), refused.text
    assert replies[1].text == "got no files; said: still there?"
    [request] = provider.requests  # the refused message never reached the model
    assert request.messages[-1].text == "still there?"
    assert [p for p in (tmp_path / "media").rglob("*") if p.is_file()] == []
    assert not list((tmp_path / "ws").rglob("big.pdf"))


def send_two_files(request: Request) -> Response:
    if request.messages[-1].tool_results:
        return text_reply("Here they are.")
    return tools_reply(
        [
            ("send_file", {"path": "chart.png", "caption": "November"}),
            ("send_file", {"path": "table.csv"}),
        ]
    )


async def test_send_file_delivers_a_png_as_an_image_and_a_csv_as_a_document(
    harness: Harness, tmp_path: Path
) -> None:
    files = sends_files(harness)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "chart.png").write_bytes(PNG)
    (tmp_path / "ws" / "table.csv").write_bytes(CSV)
    allow = {"agent": {"approver": {"allow": [{"tool": "send_file"}]}}}
    async with daemon(harness, tmp_path, allow) as (_, provider):
        provider.fn = send_two_files
        await act(harness.dm, "the chart and the table, please")
        [answer] = await delivered(harness, 1)
        sent = await delivered_files(files, 2)
        await settle()
    assert answer.text == "Here they are." and answer.chat == harness.dm_chat
    [chart] = [f for f in sent if f.data == PNG]  # a photo keeps no name on some platforms
    [table] = [f for f in sent if f.data == CSV]
    assert (chart.inline, chart.caption) == (True, "November")
    assert (table.name, table.inline) == ("table.csv", False)
    assert {chart.chat, table.chat} == {harness.dm_chat}
    assert len(files.files_delivered()) == 2


async def delivered_files(files: TakesFiles, count: int) -> list[DeliveredFile]:
    with anyio.fail_after(20):
        while len(files.files_delivered()) < count:
            await anyio.sleep(0.05)
    return files.files_delivered()


async def test_a_file_queued_before_a_kill_is_delivered_once_after_the_restart(
    harness: Harness, tmp_path: Path
) -> None:
    """What a kill -9 leaves behind (an answer's file in the outbox, not yet sent; the kill
    itself is in tests/test_telegram_media.py) is sent once by the next daemon, and never
    again by the one after it."""
    files = sends_files(harness)
    config = settings_for(tmp_path)
    chart = blob_store(config).put_sync(PNG, media_type="image/png", name="chart.png")
    store = Store(config.state.path)
    part = Outbound(transport=harness.name, chat_id=harness.dm_chat, text="Nov", attachment=chart)
    await DaemonState(store).finish(None, [part])
    store.close()
    async with daemon(harness, tmp_path):
        [sent] = await delivered_files(files, 1)
        await settle()
    async with daemon(harness, tmp_path):
        await settle()
    assert (sent.data, sent.chat) == (PNG, harness.dm_chat)
    assert len(files.files_delivered()) == 1


async def test_a_voice_note_is_answered_with_a_voice_note_and_the_text(
    harness: Harness, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """With `speech` set, a voice note's answer is the text and then a voice note: OGG/Opus of
    the length the fake speech server said (PyAV reads it back); /voice off stops it."""
    import io

    av = pytest.importorskip("av", reason="PyAV (the voice extra) reads the voice notes")
    from tests.fakes.speech import SECONDS_PER_CHAR, FakeSpeech

    files = sends_files(harness)
    speech = FakeSpeech().start()
    settings = {"speech": {"base_url": speech.base_url, "model": "tts-1"}}

    def notes() -> list[DeliveredFile]:
        return [f for f in files.files_delivered() if f.name.endswith(".ogg")]

    def said(start: str) -> bool:
        # (a harness may take a text right after a file for its caption: iMessage's does)
        texts = [d.text for d in harness.delivered()]
        texts += [f.caption for f in files.files_delivered()]
        return any(text.startswith(start) for text in texts)

    async def until(check: Any) -> None:
        with anyio.fail_after(30):
            while not check():
                await anyio.sleep(0.05)

    try:
        async with daemon(harness, tmp_path, settings):
            voice = File("voice.ogg", "audio/ogg", OGG, voice=True, seconds=3)
            await act(files.dm_file, "", voice)
            await until(lambda: notes() and said("got "))
            await act(harness.dm, "/voice off")
            await until(lambda: said("Voice replies are off"))
            await act(files.dm_file, "", voice)
            await until(lambda: sum(d.text.startswith("got ") for d in harness.delivered()) == 2)
            await settle()
            [note] = notes()  # one: none after /voice off
    finally:
        speech.stop()
    [spoken] = speech.said
    assert note.chat == harness.dm_chat
    if harness.name in NATIVE_VOICE:  # the platform's own voice message, not a file
        assert note.voice, f"{harness.name} sent the voice note as a file"
    with av.open(io.BytesIO(note.data)) as played:
        kind = (played.format.name, played.streams.audio[0].codec_context.name)
        seconds = played.duration / 1_000_000
    assert kind == ("ogg", "opus")
    assert abs(seconds - len(spoken.text) * SECONDS_PER_CHAR) < 0.2
