"""What every transport adapter must do, as scenarios run against each adapter's own fake.

An adapter joins the suite by providing a Harness: it builds the real adapter pointed at a
wire-level fake of its platform and drives that fake the way the platform would. What only some
platforms have is an optional capability (`typing_shown`, `mention_after`); a harness without
one names the reason in `no_typing` / `no_mention_after`, and its scenario is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rousseau.transports.base import Transport


@dataclass(frozen=True)
class Delivered:
    """A message the adapter sent, as the platform's fake saw it."""

    chat: str
    text: str
    thread: str | None = None


class Harness(Protocol):
    name: str
    owner: str
    """A sender id the suite puts on the allowlist."""
    stranger: str
    dm_chat: str
    """Where the owner's direct messages arrive (and their replies must go)."""
    group_chat: str
    measure: Callable[[str], int]
    limit: int

    def transport(self) -> Transport: ...

    def dm(self, text: str, *, sender: str | None = None) -> None:
        """A direct message from `sender` (default: the owner)."""
        ...

    def group(self, text: str, *, mentioned: bool) -> None:
        """A group message from the owner, mentioning the bot or not."""
        ...

    def own_message(self, text: str) -> None:
        """A message the bot itself wrote, echoed back by the platform."""
        ...

    def redeliver_last(self) -> None:
        """Deliver the last message again, as platforms do on retries."""
        ...

    def drop_connection(self) -> None:
        """Break the adapter's link to the platform once."""
        ...

    def delivered(self) -> list[Delivered]: ...


class MentionsAfterText(Protocol):
    """Optional: a harness whose platform can name the bot after other text."""

    def mention_after(self, before: str, text: str) -> None:
        """A group message from the owner: `before`, then a mention of the bot, then `text`,
        marked up as the platform marks a mention typed there."""
        ...


@dataclass(frozen=True)
class File:
    """A file a person sends: a photo, a document or a voice note."""

    name: str
    media_type: str
    data: bytes
    voice: bool = False
    seconds: int = 0
    """A voice note's length."""


@dataclass(frozen=True)
class DeliveredFile:
    """A file the adapter sent, as the platform's fake saw it."""

    chat: str
    name: str
    data: bytes
    inline: bool
    """Sent as an image the app shows in the conversation (not as a document)."""
    caption: str = ""
    voice: bool = False
    """Sent as the platform's own voice message (a play button, not a file), where the
    harness can tell."""


class TakesFiles(Protocol):
    """Optional: a harness whose platform carries files both ways."""

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        """A direct message carrying `file`, `text` its caption (may be empty)."""
        ...

    def files_delivered(self) -> list[DeliveredFile]: ...


class DeclaresSizes(Protocol):
    """Optional: a harness whose platform states a file's size apart from sending it, and can
    state another (or none)."""

    largest: int
    """Bytes of the largest file its platform takes (a real server's upload limit)."""
    # no_undeclared: str, where the platform always states a size: why (that case is skipped)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        """A direct message from the owner carrying `file`, its size stated as `declared`
        (None: no size stated) and its body sent with no length of its own."""
        ...

    def served_whole(self) -> bool | None:
        """Whether the last such file's body went out to its end (None: the fake cannot
        tell, as when the file is handed over at once)."""
        ...
