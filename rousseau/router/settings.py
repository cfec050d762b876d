"""The Router's plain settings: numbers, texts and per-transport choices read from config,
kept apart from the parts it talks to, so a test or a caller names only what it changes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rousseau.streaming import StreamSettings


@dataclass(kw_only=True, slots=True, frozen=True)
class RouterSettings:
    """How the Router behaves; its collaborators are the Router's own fields."""

    denied_reply: str = ""
    """Said to a sender over their rate limit (at most once a minute per chat); empty:
    nothing is said."""
    max_concurrent_turns: int = 64
    """Turns of different sessions running at once."""
    agent_turns: Mapping[str, int] = field(default_factory=dict)
    """Agents whose turns running at once have a limit of their own (within
    max_concurrent_turns), so a busy group cannot take every slot from a private chat."""
    session_cache: int = 256
    """Sessions kept in memory between turns (least recently used dropped first)..."""
    session_cache_messages: int = 20_000
    """...and the messages they may hold in all; a dropped session is reloaded from disk."""
    turn_timeout: float = 600.0
    """A turn still running after this is cancelled and the user told."""
    send_timeout: float = 60.0
    """One send to a platform at most; then it is abandoned and retried later."""
    streaming: Mapping[str, StreamSettings] = field(default_factory=dict)
    """Per transport: whether replies stream into the chat, and with what progress."""
    acks: Mapping[str, str] = field(default_factory=dict)
    """Per transport: the reaction put on each message taken in for a turn (a receipt)."""
    voice_replies: Mapping[str, str] = field(default_factory=dict)
    """Per transport: off, when_voice or always (see rousseau.router.voice); a transport not
    named here speaks when a voice note asked, where there is speech at all."""
    voice_hint: str = ""
    """Said once in each chat that sends audio nobody transcribes (no speech-to-text is set
    up), after the answer; empty where voice notes are transcribed."""
