"""What a transport can do beyond the protocol every one implements.

Each optional ability is a small runtime-checkable Protocol an adapter implements by having the
method or attribute; nothing probes an adapter by name. `Abilities.of` looks them up together;
the router does so once per transport when it is made, so a message never pays for an
`isinstance` against a protocol (on Python 3.11 that costs a hundred times a plain attribute
look-up). Start-up and the CLI call it where they need one answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rousseau.media import MediaIntake
    from rousseau.messages import Inbound

__all__ = [
    "Abilities",
    "Drafts",
    "Edits",
    "Finds",
    "Posts",
    "RawPreviews",
    "Reacts",
    "RepliesStay",
    "SendsFiles",
    "SharesConnections",
    "TakesFiles",
    "TakesPosts",
]


@runtime_checkable
class Edits(Protocol):
    """A transport that can show a reply as it grows: it sends a message, then edits it."""

    name: str
    max_length: int

    def measure(self, text: str) -> int: ...

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """Show `text`: a new message (`message_id` None) or that message edited; return the
        message's id. Raises Throttled when the platform asks to slow down."""
        ...


@runtime_checkable
class Finds(Protocol):
    """A transport whose `check` can find something worth fixing that is not a failure (an
    encrypted Matrix room without encryption on): `rousseau doctor` shows each as a warning."""

    findings: list[str]


@runtime_checkable
class Drafts(Protocol):
    """A transport with native drafts: a preview the app animates, gone once the answer is
    sent (Telegram's sendMessageDraft, private chats only)."""

    async def draft(self, chat_id: str, thread_id: str | None, text: str, *, draft_id: int) -> None:
        """Show `text` as draft `draft_id`. Raises Throttled when asked to slow down."""
        ...


@runtime_checkable
class Reacts(Protocol):
    """A transport that can put a reaction on a message (the receipt of `ack_reaction`)."""

    async def react(self, inbound: Inbound, emoji: str) -> None: ...


@runtime_checkable
class TakesFiles(Protocol):
    """A transport that takes files in: the daemon binds the media intake they go to."""

    def bind_media(self, media: MediaIntake) -> None: ...


@runtime_checkable
class SendsFiles(Protocol):
    """A transport that can send files (an `Outbound` with an attachment), up to a size."""

    max_file_bytes: int


@runtime_checkable
class SharesConnections(Protocol):
    """A transport whose platform spreads events across several connections of one bot (or
    that takes posts): where daemons share the state it runs on every daemon, when
    `shares_connections` is true; any other runs on the one daemon elected to poll it."""

    shares_connections: bool


@runtime_checkable
class RepliesStay(Protocol):
    """A transport whose replies go out from the daemon the chat came in on (a web page
    waiting on this connection), when `replies_stay` is true."""

    replies_stay: bool


@runtime_checkable
class RawPreviews(Protocol):
    """A transport whose previews carry the text as written (the client renders it), when
    `raw_previews` is true."""

    raw_previews: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Posts:
    """Where a transport's platform posts its updates (a webhook), and how a post is answered:
    the daemon serves the route on the web face's server when `listen` is that server's
    address, else on a server of the same kind serving it alone."""

    transport: str
    """The transport's name (its config key names the address in errors)."""
    listen: str
    """The host:port taking the posts."""
    path: str
    """The route's path."""
    take: Callable[[Mapping[str, str], bytes], Awaitable[tuple[int, str]]]
    """Answer one post, given its headers (looked up case-insensitively) and body: the
    status and text of the answer."""


@runtime_checkable
class TakesPosts(Protocol):
    """A transport whose platform posts updates to the daemon, when `posts` is set."""

    posts: Posts | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Abilities:
    """One transport's optional abilities, looked up once (see the module's docstring)."""

    edits: Edits | None = None
    """The transport, where it can show a reply as it grows."""
    drafts: Drafts | None = None
    """The transport, where it has native drafts."""
    reacts: Reacts | None = None
    """The transport, where it can react to a message."""
    takes_files: TakesFiles | None = None
    """The transport, where it takes files in."""
    max_file_bytes: int = 0
    """The largest file it sends; 0 where it sends none."""
    shares_connections: bool = False
    replies_stay: bool = False
    raw_previews: bool = False
    posts: Posts | None = None
    """Where its platform posts updates, if it does."""

    @classmethod
    def of(cls, transport: object) -> Abilities:
        return cls(
            edits=transport if isinstance(transport, Edits) else None,
            drafts=transport if isinstance(transport, Drafts) else None,
            reacts=transport if isinstance(transport, Reacts) else None,
            takes_files=transport if isinstance(transport, TakesFiles) else None,
            max_file_bytes=transport.max_file_bytes if isinstance(transport, SendsFiles) else 0,
            shares_connections=isinstance(transport, SharesConnections)
            and transport.shares_connections,
            replies_stay=isinstance(transport, RepliesStay) and transport.replies_stay,
            raw_previews=isinstance(transport, RawPreviews) and transport.raw_previews,
            posts=transport.posts if isinstance(transport, TakesPosts) else None,
        )
