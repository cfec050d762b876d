"""Opening files beneath the workspace so that no race can lead outside it.

A path is walked from a descriptor of the workspace folder, one name at a time, each name
opened relative to its parent's descriptor with O_NOFOLLOW: the kernel never follows a
symlink or `..` on our behalf, so a folder swapped for a symlink between two steps is seen
as a symlink, not gone through. Symlinks are read here and followed only while they stay
inside; `..` pops our own stack of descriptors and never climbs past the workspace. Files
are opened with O_NONBLOCK and checked on the descriptor (fstat) before any read or write,
so a FIFO, socket or device is refused without blocking, and so is a file with several hard
links (one of its other names may be outside).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

MAX_SYMLINKS = 40
"""Symlinks followed in one path before giving up, as the kernel does (ELOOP)."""

_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symlink",
}


class WorkspaceError(ValueError):
    """A path or file the workspace tools refuse; the message is the tool's error result."""


class OutsideWorkspaceError(WorkspaceError):
    """A path resolves outside the workspace."""


class NotFoundError(WorkspaceError):
    """Nothing by that name (or one of its folders is missing)."""


@dataclass(kw_only=True, slots=True)
class Opened:
    """A file or folder opened beneath the workspace."""

    fd: int
    """The open descriptor; the caller closes it."""
    stat: os.stat_result
    """fstat of `fd`, taken right after it was opened."""
    relative: str
    """Where it is, relative to the workspace root with symlinks resolved ("." for the root)."""


class Workspace:
    """The folder tools may touch; `open` and `open_file` reach only what lies beneath it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.root = Path(os.path.realpath(path))
        # An absolute path may name the root as configured or as resolved.
        self._spellings = tuple(dict.fromkeys([str(self.root), str(path.absolute())]))

    def resolve(self, path: str) -> Path:
        """The real path of `path` (relative to the root, or absolute inside it), checked.

        For naming and early checks only: what it returns can be swapped for a symlink before
        anything opens it. The tools open with `open` and `open_file`, which cannot be raced.
        """
        if "\x00" in path:
            raise OutsideWorkspaceError("path contains a NUL byte")
        candidate = Path(path).expanduser() if path.startswith("~") else Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        real = Path(os.path.realpath(candidate))
        if real != self.root and not real.is_relative_to(self.root):
            raise OutsideWorkspaceError(f"path {path!r} is outside the workspace")
        return real

    def relative(self, path: Path) -> str:
        """How to name a resolved path to the model: relative to the root."""
        rel = path.relative_to(self.root)
        return str(rel) if str(rel) != "." else "."

    def open(
        self, path: str, flags: int, *, mode: int = 0o666, create_parents: bool = False
    ) -> Opened:
        """Open `path` beneath the root with `flags` plus O_NOFOLLOW and O_NONBLOCK, walking
        it one name at a time (and making missing folders if asked). Raises WorkspaceError
        (OutsideWorkspaceError, NotFoundError) with a message meant for the model."""
        with _Walk(self, path) as walk:
            return walk.open(flags, mode, create_parents)

    def open_file(self, path: str, flags: int, *, create_parents: bool = False) -> Opened:
        """`open`, then refuse anything but a regular file with a single link, and make the
        descriptor blocking again."""
        opened = self.open(path, flags, create_parents=create_parents)
        try:
            check_regular(opened.stat, path)
            os.set_blocking(opened.fd, True)
        except BaseException:
            os.close(opened.fd)
            raise
        return opened

    def _inside(self, absolute: str) -> str | None:
        """`absolute` relative to the root, or None when it is not beneath it."""
        for base in self._spellings:
            if absolute == base:
                return "."
            prefix = base.rstrip("/") + "/"
            if absolute.startswith(prefix):
                return absolute[len(prefix) :]
        return None

    def _names(self, path: str) -> list[str]:
        """The names to walk from the root, before any symlink is read."""
        if "\x00" in path:
            raise OutsideWorkspaceError("path contains a NUL byte")
        expanded = os.path.expanduser(path) if path.startswith("~") else path
        if os.path.isabs(expanded):
            inside = self._inside(expanded)
            if inside is None:
                raise OutsideWorkspaceError(f"path {path!r} is outside the workspace")
            expanded = inside
        return expanded.split("/")


def check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse what is not a regular file with one link (raises WorkspaceError)."""
    if not stat.S_ISREG(st.st_mode):
        raise WorkspaceError(_not_regular(shown, st.st_mode))
    if st.st_nlink > 1:
        raise WorkspaceError(
            f"{shown} has {st.st_nlink} hard links; refused "
            "(it may be a file outside the workspace)"
        )


def _not_regular(shown: str, mode: int) -> str:
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    text = f"not a regular file: {shown} is {kind}"
    if not stat.S_ISDIR(mode):
        text += "; refused (reading or writing it could block)"
    return text


class _Walk:
    """One path's walk: a stack of folder descriptors from the root down, closed on exit."""

    def __init__(self, workspace: Workspace, shown: str) -> None:
        self._workspace = workspace
        self._shown = shown
        self._todo = deque(workspace._names(shown))
        self._fds: list[int] = []
        self._names: list[str] = []
        self._links = 0

    def __enter__(self) -> _Walk:
        try:
            self._fds.append(os.open(self._workspace.root, _DIR_FLAGS))
        except OSError as exc:
            raise WorkspaceError(
                f"the workspace folder {str(self._workspace.root)!r} cannot be opened: "
                f"{exc.strerror}"
            ) from exc
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def open(self, flags: int, mode: int, create_parents: bool) -> Opened:
        while True:
            name = self._walk_to_last(create_parents)
            try:
                fd = os.open(name, flags | _OPEN_FLAGS, mode, dir_fd=self._fds[-1])
            except OSError as exc:
                if exc.errno == errno.ELOOP and self._follow(name):
                    continue
                raise self._refusal(exc, name) from exc
            try:
                st = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            return Opened(fd=fd, stat=st, relative=self._relative(name))

    def _walk_to_last(self, create: bool) -> str:
        """Walk every name but the last; return it ("." when the path ends at a folder)."""
        todo = self._todo
        while todo:
            name = todo.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                self._up()
                continue
            if not todo:
                return name
            self._down(name, create)
        return "."

    def _up(self) -> None:
        if len(self._fds) == 1:
            raise OutsideWorkspaceError(f"path {self._shown!r} is outside the workspace")
        os.close(self._fds.pop())
        self._names.pop()

    def _down(self, name: str, create: bool) -> None:
        for _ in range(8):  # a folder made here may be removed before we open it; not forever
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self._fds[-1])
            except FileNotFoundError:
                if not create:
                    raise NotFoundError(f"no such file or folder: {self._shown}") from None
                with suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=self._fds[-1])
                continue
            except OSError as exc:
                # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR (ELOOP on some systems)
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and self._follow(name):
                    return
                if exc.errno == errno.ENOTDIR and self._changing(name):
                    continue  # a symlink one moment, a folder the next: look again
                if exc.errno == errno.ENOTDIR:
                    where = self._relative(name)
                    raise WorkspaceError(f"{where} is not a folder (in {self._shown})") from exc
                raise self._refusal(exc, name) from exc
            self._fds.append(fd)
            self._names.append(name)
            return
        raise WorkspaceError(f"{self._shown}: its folders keep changing; try again")

    def _changing(self, name: str) -> bool:
        """Whether `name`, which was not a folder when opened nor a symlink when read, is
        one of the two now (else it really is not a folder)."""
        try:
            st = os.stat(name, dir_fd=self._fds[-1], follow_symlinks=False)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)

    def _follow(self, name: str) -> bool:
        """Queue the target of the symlink `name`, if it is one and stays inside."""
        try:
            target = os.readlink(name, dir_fd=self._fds[-1])
        except OSError:
            return False  # not a symlink (any more): the caller reports what it found
        self._links += 1
        if self._links > MAX_SYMLINKS:
            raise WorkspaceError(f"too many levels of symbolic links in {self._shown}")
        if os.path.isabs(target):
            inside = self._workspace._inside(target)
            if inside is None:
                raise OutsideWorkspaceError(
                    f"path {self._shown!r} is outside the workspace "
                    f"(the symlink {self._relative(name)!r} points to {target!r})"
                )
            while len(self._fds) > 1:
                os.close(self._fds.pop())
                self._names.pop()
            target = inside
        self._todo.extendleft(reversed(target.split("/")))
        return True

    def _relative(self, name: str) -> str:
        names = self._names if name == "." else [*self._names, name]
        return "/".join(names) or "."

    def _refusal(self, exc: OSError, name: str) -> WorkspaceError:
        """The model's error for a failed open of `name` in the current folder."""
        shown = self._shown
        if exc.errno == errno.ENOENT:
            return NotFoundError(f"no such file or folder: {shown}")
        if exc.errno == errno.EISDIR:
            if self._relative(name) == ".":
                return WorkspaceError("path names the workspace itself")
            return WorkspaceError(_not_regular(shown, stat.S_IFDIR))
        if exc.errno == errno.ENXIO:  # a FIFO or socket with nobody at the other end
            with suppress(OSError):
                st = os.stat(name, dir_fd=self._fds[-1], follow_symlinks=False)
                return WorkspaceError(_not_regular(shown, st.st_mode))
        return WorkspaceError(f"cannot open {shown}: {exc.strerror or exc}")
