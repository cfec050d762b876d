"""The blob store, the limits on what is taken in, and the workspace copy of inbound files
(hostile names included); attachments survive the session store and reach the provider."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path

import pytest

from rousseau.agent import Agent, Attachment, Content, Message, Options, Request, Role, Session
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.media import (
    BlobStore,
    Download,
    MediaLimits,
    MediaRejected,
    safe_name,
    save_to_workspace,
)
from rousseau.state import Store

pytestmark = pytest.mark.anyio
TODAY = date(2026, 12, 1)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 64


def sending(data: bytes) -> Callable[[Download], Awaitable[None]]:
    """A platform's download that gives the file's bytes at once."""

    async def fetch(into: Download) -> None:
        await into.write(data)

    return fetch


async def test_blobs_are_stored_once_by_content(tmp_path: Path) -> None:
    blobs = BlobStore(folder=tmp_path / "media")
    first = await blobs.put(PNG, media_type="image/png", name="a.png")
    again = await blobs.put(PNG, media_type="image/png", name="b.png")
    sha = hashlib.sha256(PNG).hexdigest()
    assert (first.sha256, first.size, first.name, again.name) == (sha, len(PNG), "a.png", "b.png")
    path = tmp_path / "media" / sha[:2] / sha
    assert path.read_bytes() == PNG and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "media").rglob("*") if p.is_file()] == [sha]
    assert await blobs.read(sha) == PNG
    assert blobs.remove_sync(sha) and await blobs.read(sha) is None
    assert await blobs.read("../../etc/passwd") is None  # only a sha256 names a blob


@pytest.mark.parametrize(
    ("files", "reply"),
    [
        ([("big.pdf", "application/pdf", 21_000_000)], "Sorry, big.pdf is too large (21.0 MB)"),
        (
            [("a.png", "image/png", 12_000_000), ("b.png", "image/png", 12_000_000)],
            "Sorry, these files are too large together (24.0 MB); the limit is 20.0 MB.",
        ),
    ],
)
def test_what_is_over_the_limits_gets_a_polite_reply(
    files: list[tuple[str, str, int]], reply: str
) -> None:
    with pytest.raises(MediaRejected) as refused:
        MediaLimits().check(files)
    assert str(refused.value).startswith(reply)


async def test_a_file_of_a_type_not_taken_is_left_out_and_named(tmp_path: Path) -> None:
    from rousseau.media import Incoming, MediaIntake

    intake = MediaIntake(blobs=BlobStore(folder=tmp_path / "media"), workspace=tmp_path / "ws")
    taken = await intake.take(
        [
            Incoming(
                name="x.svg",
                media_type="image/svg+xml",
                size=21,
                fetch=sending(b"<svg onload=alert(1)>"),
            ),
            Incoming(name="p.png", media_type="image/png", size=len(PNG), fetch=sending(PNG)),
        ]
    )
    assert [a.name for a in taken.attachments] == ["p.png"] and taken.refusal == ""
    assert taken.notes == ("[not taken: x.svg (image/svg+xml)]",)
    assert not list((tmp_path / "ws").rglob("*.svg"))


async def test_a_type_with_parameters_is_the_type_taken_in(tmp_path: Path) -> None:
    """Platforms report types in any form (`Text/Plain; charset=utf-8`, WhatsApp's
    `audio/ogg; codecs=opus`): each is kept as its plain type, in one place for all."""
    from rousseau.media import Incoming, MediaIntake, media_type_of

    intake = MediaIntake(blobs=BlobStore(folder=tmp_path / "media"), workspace=tmp_path / "ws")
    file = Incoming(
        name="a.txt", media_type="Text/Plain; charset=utf-8", size=5, fetch=sending(b"hello")
    )
    taken = await intake.take([file])
    assert [a.media_type for a in taken.attachments] == ["text/plain"] and taken.notes == ()
    assert media_type_of("audio/ogg; codecs=opus") == "audio/ogg"
    assert media_type_of(None) == media_type_of("") == "application/octet-stream"
    assert media_type_of(name="chart.png") == "image/png"
    assert media_type_of("text/csv", name="chart.png") == "text/csv"  # the report comes first


def test_what_is_within_the_limits_passes() -> None:
    MediaLimits().check([("r.jpg", "image/jpeg", 5_000_000), ("v.ogg", "audio/ogg", 1_000)])


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("a\x00b.txt", "a_b.txt"),
        (".bashrc", "bashrc"),
        ("..", "file"),
        ("", "file"),
        ("x" * 500 + ".pdf", "x" * 96 + ".pdf"),
        # Invisible controls that reorder or hide what a person reads are shown, not kept:
        # `evil\u202etxt.exe` would read as "evilexe.txt".
        ("evil\u202etxt.exe", "evil[U+202E]txt.exe"),
        ("a\u2066b\u200bc.pdf", "a[U+2066]b[U+200B]c.pdf"),
    ],
)
def test_names_are_only_names(name: str, safe: str) -> None:
    assert safe_name(name) == safe


@pytest.mark.parametrize("name", ["../../etc/passwd", "a\x00b", "x" * 500 + ".pdf", "/abs/p"])
def test_a_hostile_name_lands_inside_the_workspace(tmp_path: Path, name: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    saved = save_to_workspace(workspace, name, b"data", today=TODAY)
    path = (workspace / saved).resolve()
    assert path.is_relative_to(workspace.resolve() / "inbox" / "2026-12-01")
    assert path.read_bytes() == b"data"


def test_an_existing_name_is_never_overwritten(tmp_path: Path) -> None:
    saved = [save_to_workspace(tmp_path, "r.pdf", bytes([i]), today=TODAY) for i in range(3)]
    assert saved == [
        "inbox/2026-12-01/r.pdf",
        "inbox/2026-12-01/r (2).pdf",
        "inbox/2026-12-01/r (3).pdf",
    ]
    assert [(tmp_path / s).read_bytes() for s in saved] == [b"\x00", b"\x01", b"\x02"]


def test_symlinks_the_agent_planted_lead_nowhere(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "inbox").mkdir()
    # A file of that name pointing out: skipped, never written through.
    os.symlink(outside / "victim", workspace / "inbox" / "2026-12-01", target_is_directory=True)
    with pytest.raises(PermissionError):
        save_to_workspace(workspace, "r.pdf", b"x", today=TODAY)
    (workspace / "inbox" / "2026-12-01").unlink()
    (workspace / "inbox" / "2026-12-01").mkdir()
    os.symlink(outside / "victim", workspace / "inbox" / "2026-12-01" / "r.pdf")
    assert save_to_workspace(workspace, "r.pdf", b"x", today=TODAY) == "inbox/2026-12-01/r (2).pdf"
    assert not (outside / "victim").exists()


def test_stand_ins_say_what_the_file_was() -> None:
    photo = Attachment(sha256="0" * 64, media_type="image/jpeg", size=1_234_567, name="r.jpg")
    assert photo.stand_in() == "[photo: r.jpg, 1.2 MB]"
    note = Attachment(
        sha256="0" * 64, media_type="audio/ogg", size=900, saved_as="inbox/2026-12-01/v.ogg"
    )
    assert note.stand_in() == "[audio: audio/ogg, 900 bytes, saved as inbox/2026-12-01/v.ogg]"


async def test_attachments_survive_the_store_and_reach_the_provider(tmp_path: Path) -> None:
    blobs = BlobStore(folder=tmp_path / "media")
    photo = await blobs.put(PNG, media_type="image/png", name="r.png")
    seen: list[Request] = []

    def answer(request: Request) -> object:
        seen.append(request)
        return text_reply("a receipt")

    with Store(str(tmp_path / "s.db")) as store:
        session = await store.create_session("s1")
        agent = Agent(FunctionProvider(answer), options=Options(history=store, media=blobs))
        await agent.append(
            session,
            Message(
                role=Role.USER, content=[Content.of_text("this?"), Content.of_attachment(photo)]
            ),
        )
        await agent.turn(session)
        loaded = await store.load("s1")
    assert loaded is not None and loaded.messages[0].attachments == [photo]
    assert seen[0].media == {photo.sha256: PNG}
    no_media = Agent(FunctionProvider(answer))
    await no_media.turn(Session(id="s2", messages=list(loaded.messages[:1])))
    assert seen[1].media == {}


async def test_files_in_and_out_are_durable_with_their_messages(tmp_path: Path) -> None:
    """An inbound's files come back with it on a replay; a file queued with an answer is a
    row of the outbox like text, so it goes out once whatever restarts in between."""
    from rousseau.messages import Inbound, Outbound
    from rousseau.state.daemon_state import DaemonState

    photo = Attachment(sha256="a" * 64, media_type="image/png", size=3, name="p.png")
    inbound = Inbound(
        transport="telegram",
        chat_id="42",
        sender_id="42",
        message_id="42:7",
        text="",
        attachments=(photo,),
    )
    path = str(tmp_path / "s.db")
    with Store(path) as store:
        assert await DaemonState(store).accept(inbound)
    with Store(path) as store:  # a restart
        state = DaemonState(store)
        [pending] = await state.pending()
        assert pending.attachments == (photo,) and pending.refusal == ""
        part = Outbound(transport="telegram", chat_id="42", text="Nov", attachment=photo)
        await state.finish(pending, [part])
    with Store(path) as store:  # another one, before delivery
        [row] = await DaemonState(store).due("telegram")
        assert row.message == part


async def test_the_sweep_deletes_blobs_nothing_refers_to_once_they_are_old(tmp_path: Path) -> None:
    from rousseau.state.daemon_state import DaemonState

    blobs = BlobStore(folder=tmp_path / "media")
    kept = await blobs.put(PNG, media_type="image/png", name="kept.png")
    orphan = await blobs.put(b"orphan", media_type="text/plain", name="o.txt")
    fresh = await blobs.put(b"fresh", media_type="text/plain", name="f.txt")
    old = 1_000_000.0
    for a in (kept, orphan):
        os.utime(blobs.path_of(a.sha256), (old, old))
    with Store(str(tmp_path / "s.db")) as store:
        session = await store.create_session("s1")
        message = Message(role=Role.USER, content=[Content.of_attachment(kept)])
        await Agent(
            FunctionProvider(lambda r: text_reply("ok")), options=Options(history=store)
        ).append(session, message)
        await store.flush()
        state = DaemonState(store)
        in_use = await state.media_in_use()
        assert in_use == {kept.sha256}
        assert blobs.prune_sync(in_use, older_than=old + 1) == 1  # the old orphan only
        assert await blobs.read(kept.sha256) == PNG and await blobs.read(fresh.sha256) == b"fresh"
        assert await blobs.read(orphan.sha256) is None
        await store.delete_session("s1")  # its files go at the next sweep
        assert blobs.prune_sync(await state.media_in_use(), older_than=old + 1) == 1
        assert await blobs.read(kept.sha256) is None


async def test_a_workspace_the_agent_broke_still_lets_files_in(tmp_path: Path) -> None:
    """A symlink planted at inbox/ (bash can) costs the copy, never the message: otherwise
    the platform would hand the same update over and over."""
    from rousseau.media import Incoming, MediaIntake

    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(tmp_path, workspace / "inbox")
    intake = MediaIntake(blobs=BlobStore(folder=tmp_path / "media"), workspace=workspace)
    taken = await intake.take(
        [Incoming(name="p.png", media_type="image/png", size=len(PNG), fetch=sending(PNG))]
    )
    [photo] = taken.attachments
    assert photo.saved_as == "" and await intake.blobs.read(photo.sha256) == PNG


def test_a_refusal_shows_a_hidden_control_in_the_name() -> None:
    with pytest.raises(MediaRejected) as refused:
        MediaLimits(max_bytes=10).check([("evil\u202etxt.exe", "text/plain", 11)])
    assert "evil[U+202E]txt.exe" in str(refused.value)
