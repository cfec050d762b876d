"""One inbound file on its way into the blob store, written to disk as it arrives.

Every adapter downloads an inbound file into a `Download`, whatever its platform's SDK gives:
a stream of chunks (HTTP), a file signal-cli saved, or (where the SDK only returns bytes)
the bytes at once. The download stops at its limit however large the platform said the file
was, or whether it said at all; nothing it writes is held in memory beyond a chunk, and
nothing is left in the store unless the file is kept.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterable
from pathlib import Path
from typing import BinaryIO

import anyio

CHUNK = 256 * 1024
"""Bytes gathered before they are written (on a worker thread), and read at a time."""
PARTIAL = ".partial"
"""The blob store's folder of files still downloading (the sweep removes stale ones)."""


class TooLarge(Exception):
    """A download went past its limit (or was declared larger than it): stopped there."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit:,} bytes")
        self.limit = limit


class Download:
    """A file being received: counted, hashed and written to a temporary file of the blob
    store's folder; `TooLarge` past `limit` bytes. `discard` removes what was written."""

    def __init__(self, folder: Path, *, limit: int) -> None:
        self.folder = folder
        """The blob store's folder."""
        self.path = folder / PARTIAL / uuid.uuid4().hex
        """Where the bytes are written; created at the first write."""
        self.limit = limit
        self.size = 0
        """Bytes received so far."""
        self._digest = hashlib.sha256()
        self._pending = bytearray()
        self._file: BinaryIO | None = None
        self._finished = False

    def declared(self, size: int | None) -> None:
        """What the sender says the file's size is (a Content-Length): refused at once when
        over the limit; nothing is trusted otherwise, every byte is still counted."""
        if size is not None and size > self.limit:
            raise TooLarge(self.limit)

    async def write(self, data: bytes) -> None:
        """More of the file; TooLarge (what came is then discarded) past the limit."""
        self.size += len(data)
        if self.size > self.limit:
            await self.discard()
            raise TooLarge(self.limit)
        self._pending += data
        if len(self._pending) >= CHUNK:
            await self._flush()

    async def write_all(self, chunks: AsyncIterable[bytes]) -> None:
        """Every chunk of a stream, stopping it at the limit."""
        async for chunk in chunks:
            await self.write(chunk)

    async def copy_file(self, path: Path) -> None:
        """A file on this machine (one an SDK saved), read a chunk at a time: never more of
        it than the limit allows, whatever size it has."""
        source = await anyio.to_thread.run_sync(_open_plain, path)
        try:
            while chunk := await anyio.to_thread.run_sync(source.read, CHUNK):
                await self.write(chunk)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(source.close)

    async def finish(self) -> str:
        """Every byte on disk (flushed and synced); the sha256 of the file."""
        await self._flush()
        if not self._finished:
            await anyio.to_thread.run_sync(self._close, True)
            self._finished = True
        return self._digest.hexdigest()

    async def read(self) -> bytes:
        """The whole file, finished (at most `limit` bytes): for a voice note's transcription."""
        await self.finish()
        if not self.size:
            return b""
        return await anyio.to_thread.run_sync(self.path.read_bytes)

    async def discard(self) -> None:
        """Remove what was written (also after `finish`, unless the file was kept)."""
        self._pending.clear()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._remove)

    async def _flush(self) -> None:
        if not self._pending:
            return
        data, self._pending = bytes(self._pending), bytearray()
        await anyio.to_thread.run_sync(self._write, data)

    def _write(self, data: bytes) -> None:
        if self._file is None:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path.parent.mkdir(exist_ok=True, mode=0o700)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
            self._file = os.fdopen(fd, "wb")
        self._digest.update(data)
        self._file.write(data)

    def _close(self, sync: bool) -> None:
        if self._file is None:
            return
        if sync:
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()

    def _remove(self) -> None:
        self._close(False)
        self._file = None
        self.path.unlink(missing_ok=True)

    @property
    def written(self) -> bool:
        """Whether a file was made (an empty download makes none)."""
        return self._file is not None


def _open_plain(path: Path) -> BinaryIO:
    """A regular file opened for reading, never through a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    return os.fdopen(fd, "rb")
