"""Inbound files streamed into the blob store: stopped at the limit whatever the platform
declared, kept whole within it, and nothing partial left behind either way."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from rousseau.media import BlobStore, Download, Incoming, MediaIntake, MediaLimits, TooLarge
from rousseau.media.download import CHUNK

pytestmark = pytest.mark.anyio
PIECE = b"\x07" * 65_536
LIMIT = 1_000_000


class Endless:
    """A platform's download that sends `pieces` chunks, however many the file was said to
    be; how many it got to send."""

    def __init__(self, pieces: int = 1000) -> None:
        self.pieces = pieces
        self.sent = 0

    async def __call__(self, into: Download) -> None:
        for _ in range(self.pieces):
            self.sent += 1
            await into.write(PIECE)


def files_in(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def intake(tmp: Path) -> MediaIntake:
    return MediaIntake(
        blobs=BlobStore(folder=tmp / "media"),
        workspace=tmp / "ws",
        limits=MediaLimits(max_bytes=LIMIT, types=("application/*",)),
    )


@pytest.mark.parametrize("declared", [100, None], ids=["declares-100-bytes", "declares-nothing"])
async def test_a_file_larger_than_declared_is_stopped_at_the_limit(
    tmp_path: Path, declared: int | None
) -> None:
    """64 MB sent for a file said to be 100 bytes (or of no size): the download stops a
    chunk past the limit, the sender is told, and nothing of it is kept."""
    endless = Endless()
    taken = await intake(tmp_path).take(
        [Incoming(name="big.bin", media_type="application/zip", size=declared, fetch=endless)]
    )
    assert taken.refusal == "Sorry, big.bin is too large (more than 1.0 MB); the limit is 1.0 MB."
    assert taken.attachments == ()
    assert endless.sent == LIMIT // len(PIECE) + 1
    assert files_in(tmp_path / "media") == [] and files_in(tmp_path / "ws") == []


async def test_a_file_past_what_the_earlier_ones_left_refuses_them_all(tmp_path: Path) -> None:
    first, second = Endless(pieces=9), Endless()  # 590 KB, then more than the 410 KB left
    taken = await intake(tmp_path).take(
        [
            Incoming(name="a.pdf", media_type="application/pdf", size=None, fetch=first),
            Incoming(name="b.pdf", media_type="application/pdf", size=None, fetch=second),
        ]
    )
    assert taken.refusal == "Sorry, these files are too large together; the limit is 1.0 MB."
    assert second.sent == (LIMIT - 9 * len(PIECE)) // len(PIECE) + 1
    assert files_in(tmp_path / "media") == []  # the first, downloaded whole, went too


async def test_a_file_within_the_limit_is_kept_whole(tmp_path: Path) -> None:
    endless = Endless(pieces=14)  # 917 KB: several writes of CHUNK
    assert 14 * len(PIECE) > 3 * CHUNK
    taken = await intake(tmp_path).take(
        [Incoming(name="r.pdf", media_type="application/pdf", size=None, fetch=endless)]
    )
    [kept] = taken.attachments
    data = PIECE * 14
    assert (kept.sha256, kept.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert files_in(tmp_path / "media") == [tmp_path / "media" / kept.sha256[:2] / kept.sha256]
    assert (tmp_path / "media" / kept.sha256[:2] / kept.sha256).read_bytes() == data
    assert (tmp_path / "ws" / kept.saved_as).read_bytes() == data


async def test_a_download_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    async def broken(into: Download) -> None:
        for _ in range(8):
            await into.write(PIECE)
        raise ConnectionResetError("the platform hung up")

    with pytest.raises(ConnectionResetError):
        await intake(tmp_path).take(
            [Incoming(name="r.pdf", media_type="application/pdf", size=None, fetch=broken)]
        )
    assert files_in(tmp_path / "media") == []


async def test_a_declared_length_over_the_limit_is_refused_before_any_byte(tmp_path: Path) -> None:
    download = BlobStore(folder=tmp_path / "media").download(LIMIT)
    download.declared(LIMIT)  # exactly the limit is fine
    with pytest.raises(TooLarge):
        download.declared(LIMIT + 1)
    assert files_in(tmp_path / "media") == []


async def test_the_sweep_removes_what_a_crash_left_downloading(tmp_path: Path) -> None:
    blobs = BlobStore(folder=tmp_path / "media")
    download = blobs.download(LIMIT)
    await download.write(PIECE * 5)
    await download.finish()  # on disk, never kept: as a crash leaves it
    left = download.path
    assert left.is_file()
    kept = await blobs.put(b"kept", media_type="text/plain")
    old = time.time() - 7200
    os.utime(left, (old, old))
    assert blobs.prune_sync({kept.sha256}, older_than=time.time() - 3600) == 0
    assert not left.exists() and await blobs.read(kept.sha256) == b"kept"
