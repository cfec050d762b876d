"""Attachments' bytes: a content-addressed blob store, the limits on what is taken in, and the
copy of each inbound file that the agent's tools can work on.

The core only ever holds an `Attachment` (a sha256, a media type, a size, a name); the bytes
are written here once, whatever chat sent them how often, and read back for each model
request. Nothing here opens, renders or runs a file: it is stored and passed on as bytes.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import mimetypes
import os
import re
import shutil
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog

from rousseau.agent import Attachment, BudgetExceededError, ProviderError
from rousseau.media.download import PARTIAL, Download, TooLarge
from rousseau.private import private_folder

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TYPES",
    "MAX_NAME",
    "BlobStore",
    "Download",
    "Incoming",
    "MediaIntake",
    "MediaLimits",
    "MediaRejected",
    "Taken",
    "TooLarge",
    "Transcribes",
    "media_type_of",
    "move_to_workspace",
    "safe_name",
    "save_to_workspace",
]

_log = structlog.get_logger("rousseau.media")

DEFAULT_MAX_BYTES = 20_000_000
DEFAULT_TYPES = (
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/csv",
    "text/markdown",
    "audio/*",
)
"""What is taken in unless configured otherwise. No SVG or HTML: they can carry scripts."""
MAX_NAME = 100
"""Characters of a sanitised file name at most (its extension kept)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\:*?\"<>|]+")


def media_type_of(reported: str | None = None, *, name: str = "") -> str:
    """A media type as kept: the one a platform reported, lowercased, its parameters dropped
    (`audio/ogg; codecs=opus` is `audio/ogg`); else guessed from the file's `name`; else
    application/octet-stream."""
    found = (reported or "").split(";", 1)[0].strip().lower()
    if not found and name:
        found = mimetypes.guess_type(name)[0] or ""
    return found or "application/octet-stream"


class MediaRejected(Exception):
    """Attachments over the size limits; the message is the polite reply the sender gets."""


@dataclass(kw_only=True, slots=True)
class MediaLimits:
    max_bytes: int = DEFAULT_MAX_BYTES
    """Per attachment, and for all of one message's attachments together."""
    types: tuple[str, ...] = DEFAULT_TYPES
    """Media types taken in; `type/*` patterns allowed."""

    def allows(self, media_type: str) -> bool:
        return any(fnmatchcase(media_type.lower(), t) for t in self.types)

    def check(self, attachments: list[tuple[str, str, int]]) -> None:
        """Raise MediaRejected unless every (name, media type, size) is within the size
        limits, one by one and all together."""
        total = 0
        for name, media_type, size in attachments:
            label = safe_name(name) if name else media_type
            if size > self.max_bytes:
                raise MediaRejected(
                    f"Sorry, {label} is too large ({_mb(size)}); the limit is"
                    f" {_mb(self.max_bytes)}."
                )
            total += size
        if total > self.max_bytes:
            raise MediaRejected(
                f"Sorry, these files are too large together ({_mb(total)});"
                f" the limit is {_mb(self.max_bytes)}."
            )

    def stopped(self, name: str, media_type: str, *, together: bool) -> MediaRejected:
        """The refusal for a file whose download went past the limit (its size unknown,
        or not what the platform said): `together`, past what the message's earlier files
        left of it."""
        if together:
            return MediaRejected(
                f"Sorry, these files are too large together; the limit is {_mb(self.max_bytes)}."
            )
        label = safe_name(name) if name else media_type
        return MediaRejected(
            f"Sorry, {label} is too large (more than {_mb(self.max_bytes)}); the limit is"
            f" {_mb(self.max_bytes)}."
        )


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


@dataclass(kw_only=True, slots=True)
class BlobStore:
    """Files by the sha256 of their bytes: `folder/ab/abcdef…`, written once, mode 0600.

    It is a MediaSource: `read` gives the bytes back (None once they are gone)."""

    folder: Path

    def path_of(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.folder / sha256[:2] / sha256

    def put_sync(self, data: bytes, *, media_type: str, name: str = "") -> Attachment:
        """Store the bytes (once: the same bytes again cost nothing) and describe them."""
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.path_of(sha256)
        if path.exists():  # stored before: now in use again, so young for the sweep
            os.utime(path)
        else:
            private_folder(self.folder)
            path.parent.mkdir(exist_ok=True, mode=0o700)
            tmp = path.with_name(f".{sha256}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        return Attachment(sha256=sha256, media_type=media_type, size=len(data), name=name)

    async def put(self, data: bytes, *, media_type: str, name: str = "") -> Attachment:
        return await anyio.to_thread.run_sync(
            lambda: self.put_sync(data, media_type=media_type, name=name)
        )

    def download(self, limit: int) -> Download:
        """A file to receive into this store, at most `limit` bytes (see `keep`)."""
        return Download(self.folder, limit=limit)

    async def keep(self, download: Download, *, media_type: str, name: str = "") -> Attachment:
        """A received file moved into the store (once: the same bytes again cost nothing)
        and described."""
        sha256 = await download.finish()
        if not download.written:  # nothing came: the empty file
            return await self.put(b"", media_type=media_type, name=name)
        await anyio.to_thread.run_sync(self._move_in, download.path, sha256)
        return Attachment(sha256=sha256, media_type=media_type, size=download.size, name=name)

    def _move_in(self, received: Path, sha256: str) -> None:
        path = self.path_of(sha256)
        if path.exists():  # stored before: now in use again, so young for the sweep
            os.utime(path)
            received.unlink()
        else:
            path.parent.mkdir(exist_ok=True, mode=0o700)
            os.replace(received, path)

    def read_sync(self, sha256: str) -> bytes | None:
        try:
            return self.path_of(sha256).read_bytes()
        except (FileNotFoundError, ValueError):
            return None

    async def read(self, sha256: str) -> bytes | None:
        return await anyio.to_thread.run_sync(self.read_sync, sha256)

    def prune_sync(self, keep: set[str], *, older_than: float) -> int:
        """Delete the blobs not in `keep` last written before `older_than` (a time.time());
        how many went. The age spares a file stored a moment ago for a message that is not
        recorded yet."""
        removed = 0
        if not self.folder.is_dir():
            return 0
        for bucket in os.scandir(self.folder):
            if not bucket.is_dir(follow_symlinks=False):
                continue
            if bucket.name == PARTIAL:  # downloads a crash left unfinished
                for entry in os.scandir(bucket.path):
                    if entry.stat(follow_symlinks=False).st_mtime < older_than:
                        os.unlink(entry.path)
                continue
            for entry in os.scandir(bucket.path):
                if (
                    _SHA256.fullmatch(entry.name)
                    and entry.name not in keep
                    and entry.stat(follow_symlinks=False).st_mtime < older_than
                ):
                    os.unlink(entry.path)
                    removed += 1
        return removed

    def remove_sync(self, sha256: str) -> bool:
        """Delete a blob (the caller knows nothing refers to it any more)."""
        try:
            self.path_of(sha256).unlink()
        except (FileNotFoundError, ValueError):
            return False
        return True


def safe_name(name: str) -> str:
    """A file name that is only a name: no folders, no control or reserved characters, no
    leading dot, at most MAX_NAME characters with its extension kept; 'file' if nothing is
    left."""
    name = unicodedata.normalize("NFC", name)
    name = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1])
    name = "".join(_shown(c) for c in name)
    name = name.strip(" ._") or "file"
    if len(name) > MAX_NAME:
        stem, dot, ext = name.rpartition(".")
        ext = ext[:10] if dot and stem else ""
        name = name[: MAX_NAME - len(ext) - 1].rstrip(" ._") + ("." + ext if ext else "")
    return name


def _shown(char: str) -> str:
    """An invisible formatting character (a right-to-left override, a zero-width space) as
    its code point: kept, it makes `evil\u202etxt.exe` read as "evilexe.txt"."""
    return f"[U+{ord(char):04X}]" if unicodedata.category(char) == "Cf" else char


def save_to_workspace(workspace: Path, name: str, data: bytes | Path, *, today: date) -> str:
    """Write an inbound file (its bytes, or the file at a path, copied) to
    `inbox/YYYY-MM-DD/NAME` in the workspace and return that path, relative to the workspace.
    The name is sanitised; an existing file is never overwritten (`NAME (2).ext`, ...); a
    folder on the way that leads out of the workspace (a symlink the agent made) is refused
    with PermissionError."""
    workspace.mkdir(parents=True, exist_ok=True)
    root = workspace.resolve()
    folder = root
    for part in ("inbox", today.isoformat()):
        folder = folder / part
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        if folder.is_symlink() or not folder.is_dir():
            raise PermissionError(f"{folder} is not a folder of the workspace")
    if not folder.resolve().is_relative_to(root):
        raise PermissionError(f"{folder} leads out of the workspace")
    stem, dot, ext = safe_name(name).rpartition(".")
    if not dot or not stem:
        stem, ext = safe_name(name), ""
    for n in range(1, 1000):
        candidate = f"{stem}{f' ({n})' if n > 1 else ''}{'.' + ext if ext else ''}"
        path = folder / candidate
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink planted under that name
                continue
            raise
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, Path):
                with data.open("rb") as source:
                    shutil.copyfileobj(source, f)
            else:
                f.write(data)
        return path.relative_to(root).as_posix()
    raise FileExistsError(f"too many files named {stem} in {folder}")


@dataclass(kw_only=True, slots=True)
class Incoming:
    """A file a platform says a message carries, before it is downloaded."""

    name: str
    media_type: str
    """As the platform reports it (kept as media_type_of makes it)."""
    size: int | None
    """As the platform reports it (None if it does not); never trusted: the download
    itself stops at the limit."""
    fetch: Callable[[Download], Awaitable[None]]
    """Downloads it through the platform's SDK into the download given, which stops it at
    the limit (TooLarge)."""
    voice: bool = False
    """A voice note (spoken to the bot), to be transcribed where that is set up."""
    duration: float | None = None
    """Seconds of audio, as the platform reports them."""

    def __post_init__(self) -> None:
        self.media_type = media_type_of(self.media_type)  # whatever form the platform used


@dataclass(kw_only=True, slots=True, frozen=True)
class Taken:
    """What became of one message's files."""

    attachments: tuple[Attachment, ...] = ()
    refusal: str = ""
    """Set when the files were refused (too large): the polite reply; nothing was stored."""
    notes: tuple[str, ...] = ()
    """Lines for the message's text: one per voice note (`[voice note, 0:42] what was
    said`) and one per file of a type not taken in (`[not taken: a.exe (…)]`)."""


class Transcribes(Protocol):
    async def transcribe(self, data: bytes, *, name: str, media_type: str) -> str: ...


async def move_to_workspace(
    blobs: BlobStore, attachment: Attachment, *, source: Path, target: Path
) -> Attachment:
    """A file that arrived into `source`'s inbox/, moved to `target`'s: the agent answering
    works in another workspace than the one files are taken into (see rousseau.agents)."""
    blob = blobs.path_of(attachment.sha256)
    present = await anyio.to_thread.run_sync(blob.is_file)
    saved = await _copy_to(target, attachment.name, blob) if present else ""
    if attachment.saved_as:  # not left where the other agent's tools would find it
        await anyio.to_thread.run_sync(_remove_copy, source, attachment.saved_as)
    return replace(attachment, saved_as=saved)


async def _copy_to(workspace: Path, name: str, data: bytes | Path) -> str:
    """A file's copy in the workspace's inbox/ (see save_to_workspace), or "" when it cannot
    be made: the file is still kept in the blob store."""
    save = functools.partial(save_to_workspace, workspace, name, data, today=date.today())
    try:
        return await anyio.to_thread.run_sync(save)
    except OSError as exc:  # e.g. a symlink the agent planted
        _log.warning("media.workspace_copy_failed", name=name, error=str(exc))
        return ""


def _remove_copy(workspace: Path, saved_as: str) -> None:
    """Remove an inbound file's copy from the workspace, if it is still a file of it."""
    root = workspace.resolve()
    path = root / saved_as
    if path.parent.resolve().is_relative_to(root) and not path.is_symlink():
        path.unlink(missing_ok=True)


@dataclass(kw_only=True, slots=True)
class MediaIntake:
    """What adapters hand an inbound message's files to, before the platform is
    acknowledged: the limits are checked on what the platform reports, then each file is
    downloaded, stored in the blob store and copied to the workspace's inbox/."""

    blobs: BlobStore
    workspace: Path
    limits: MediaLimits = field(default_factory=MediaLimits)
    transcriber: Transcribes | None = None
    admits: Callable[[Any], Awaitable[bool]] | None = None
    """Whether an inbound's sender may have files downloaded at all (the daemon sets the
    router's admission check); adapters ask before fetching anything."""

    async def take(self, files: Sequence[Incoming]) -> Taken:
        """The stored attachments (and voice notes' transcripts), or the polite refusal.
        Files of a type not taken in are left out, each named in a note, so the message is
        still answered (a signature or a calendar invite beside the text of a mail).

        Each file is streamed to disk, stopped where it passes what the limit leaves of it
        whatever its platform declared; a refused message leaves nothing in the store."""
        skipped = [
            f"[not taken: {safe_name(f.name)} ({f.media_type})]"
            for f in files
            if not self.limits.allows(f.media_type)
        ]
        files = [f for f in files if self.limits.allows(f.media_type)]
        received: list[tuple[Incoming, Download]] = []
        try:
            self.limits.check([(f.name, f.media_type, f.size or 0) for f in files])
            left = self.limits.max_bytes
            for f in files:
                download = self.blobs.download(left)
                received.append((f, download))
                try:
                    await f.fetch(download)
                except TooLarge:
                    together = left < self.limits.max_bytes
                    raise self.limits.stopped(f.name, f.media_type, together=together) from None
                left -= download.size
            transcripts = [await self._transcript(f, d) for f, d in received if f.voice]
            stored: list[Attachment] = []
            for f, download in received:
                name = safe_name(f.name)  # what the model is shown, too
                attachment = await self.blobs.keep(download, media_type=f.media_type, name=name)
                blob = self.blobs.path_of(attachment.sha256)
                saved = await _copy_to(self.workspace, name, blob)
                stored.append(replace(attachment, saved_as=saved))
        except MediaRejected as refused:
            return Taken(refusal=str(refused))
        finally:
            for _, download in received:
                await download.discard()  # nothing once kept
        return Taken(attachments=tuple(stored), notes=(*transcripts, *skipped))

    async def _transcript(self, voice: Incoming, download: Download) -> str:
        """`[voice note, 0:42] what was said`, or a line saying why there is no text. The
        transcription API takes the audio in one request: read whole, within the limit."""
        label = "[voice note]"
        if voice.duration is not None:
            seconds = int(voice.duration)
            label = f"[voice note, {seconds // 60}:{seconds % 60:02d}]"
        if self.transcriber is None:
            return f"{label} (not transcribed: media.transcription is not set up)"
        try:
            text = await self.transcriber.transcribe(
                await download.read(), name=voice.name, media_type=voice.media_type
            )
        except BudgetExceededError:  # the meter logged it (and told the owners)
            return f"{label} (not transcribed: the spending limit is reached)"
        except ProviderError as exc:
            _log.warning("media.transcription_failed", error=str(exc))
            return f"{label} (could not be transcribed)"
        return f"{label} {text}" if text else f"{label} (nothing was said)"
