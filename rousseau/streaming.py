"""Replies that grow in the chat while the model writes them: a preview message, edited in
place at most once a second, that shows the answer so far, or what the agent is doing.

The preview is only a view. The answer itself still goes through the outbox when the turn
ends, in the same transaction that completes the inbound. Its first parts *replace* the
preview's messages (a final edit), so the chat ends with exactly the answer, once. The
preview's message ids are kept with the inbound as they are made, so a daemon that restarts
mid-stream edits the same messages and never leaves a half answer as the last word.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio
import structlog

from rousseau.agent import ToolUse
from rousseau.transports.abilities import Drafts, Edits
from rousseau.transports.base import Throttled
from rousseau.transports.split import split_message

log = structlog.get_logger("rousseau.streaming")

INTERVAL = 1.0
"""Seconds between two updates of one preview (and before the first): one edit a second."""
FAILURE_PAUSE = 5.0
"""Seconds without updates after an update failed for another reason than a rate limit."""
WRITING = " …"
"""Put after the text while it is still being written."""
LEFTOVER = "⋯"
"""What a preview message the answer does not need any more is edited to."""
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.M)


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    """One transport's streaming settings (see TransportConfig)."""

    streaming: Literal["off", "edit", "native"] = "edit"
    progress: Literal["off", "tools"] | None = None
    """None: tool progress in direct chats, none in groups."""
    interval: float = INTERVAL
    """Seconds between two updates of a preview (a web page takes them faster than a
    platform's rate limits allow)."""

    def shows_progress(self, is_group: bool) -> bool:
        if self.progress is None:
            return not is_group
        return self.progress == "tools"


def status_line(use: ToolUse) -> str:
    """A short line saying what a tool call does, for the preview while it runs."""
    value = next(
        (
            str(use.input[k])
            for k in ("command", "path", "pattern", "query")
            if isinstance(use.input.get(k), str)
        ),
        "",
    )
    value = " ".join(value.split())
    if len(value) > 60:
        value = value[:59] + "…"
    shown = f"`{value}`" if value else ""
    doing = {
        "bash": f"running {shown}",
        "read": f"reading {shown}",
        "write": f"writing {shown}",
        "edit": f"editing {shown}",
        "grep": f"searching for {shown}",
        "send_file": f"attaching {shown}",
    }.get(use.name, f"using {use.name}")
    return f"⏳ {doing.strip()}…"


def closed(text: str) -> str:
    """Text safe to show mid-stream: a code fence the model has opened and not yet closed
    is closed, so the rest of the message is not swallowed into code."""
    if len(_FENCE.findall(text)) % 2:
        return text.rstrip("\n") + "\n```"
    return text


@dataclass(kw_only=True)
class Preview:
    """One turn's preview in one chat. Feed it with `write` and `status` as the turn runs,
    while `run` updates the chat in its own task; stop that task (cancel it) when the turn
    ends: an update in flight finishes first, so every message shown is in `ids`. Given
    `due`, the preview asks for that task itself, when its first update is due."""

    transport: Edits
    chat_id: str
    thread_id: str | None = None
    ids: list[str] = field(default_factory=list)
    """The preview's messages, in order (those of an earlier try of the same turn first)."""
    keep: Callable[[list[str]], Awaitable[None]] | None = None
    """Called with `ids` whenever a message is added to them (the router keeps them with
    the inbound)."""
    drafts: Drafts | None = None
    """Show the reply as a native draft instead (nothing to edit or keep: the answer is
    then sent as a new message)."""
    draft_id: int = 1
    interval: float = INTERVAL
    raw: bool = False
    """Show the text as written, with no fence closed and no mark after it: for a
    transport that renders (or streams) the text itself, which says so with a true
    `raw_previews`."""
    clock: Callable[[], float] = time.monotonic
    due: Callable[[float], None] | None = None
    """Called once, with the seconds until the first update, to start `run` then."""
    _text: str = ""
    _status: str = ""
    _fresh: bool = False
    _shown: list[str] = field(default_factory=list)
    _next_at: float | None = None
    _changed: anyio.Event = field(default_factory=anyio.Event)
    updates: int = 0
    """Messages sent or edited so far (for the figures)."""

    def write(self, delta: str) -> None:
        """More of the answer."""
        if self._fresh:  # a new step's text replaces the last step's
            self._text, self._fresh = "", False
        self._text += delta
        self._status = ""
        self._touch()

    def next_step(self) -> None:
        """The model finished one response; text that follows starts afresh."""
        self._fresh = True

    def status(self, line: str) -> None:
        """What the agent does now (a tool running); the text so far is of an earlier step."""
        self._text, self._status = "", line
        self._touch()

    def _touch(self) -> None:
        if self._next_at is None:  # the first update comes one interval after the first token
            self._next_at = self.clock() + self.interval
            if self.due is not None:
                self.due(self.interval)
        self._changed.set()

    async def run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            assert self._next_at is not None
            await anyio.sleep(max(0.0, self._next_at - self.clock()))
            with anyio.CancelScope(shield=True):  # a message sent is always in ids
                await self._update()

    async def _draft(self) -> None:
        """The draft shows the part being written (a draft is one message)."""
        assert self.drafts is not None
        view = self._view()
        part = view[-1] if view else ""
        if part and self._shown != [part]:
            await self.drafts.draft(self.chat_id, self.thread_id, part, draft_id=self.draft_id)
            self.updates += 1
            self._shown = [part]

    def _view(self) -> list[str]:
        if self.raw:
            text = self._status or self._text
        else:
            text = self._status or (closed(self._text.rstrip()) + WRITING if self._text else "")
        if not text.strip():
            return []
        return split_message(text, self.transport.max_length, self.transport.measure)

    async def settle(self) -> None:
        """Wait until the next update may be made (the answer's final edit is one)."""
        if self.ids and self._next_at is not None:
            await anyio.sleep(max(0.0, self._next_at - self.clock()))

    async def _update(self) -> None:
        self._next_at = self.clock() + self.interval
        try:
            if self.drafts is not None:
                await self._draft()
                return
            for i, part in enumerate(self._view()):
                if i < len(self._shown) and self._shown[i] == part:
                    continue
                known = self.ids[i] if i < len(self.ids) else None
                message_id = await self.transport.preview(
                    self.chat_id, self.thread_id, part, message_id=known
                )
                self.updates += 1
                del self._shown[i:]
                self._shown.append(part)
                if known is None:
                    self.ids.append(message_id)
                    if self.keep is not None:
                        await self.keep(list(self.ids))
        except Throttled as slow:
            self._next_at = self.clock() + max(self.interval, slow.retry_after)
            self._changed.set()  # what was not shown is shown after the wait
            log.info("streaming.throttled", transport=self.transport.name, wait=slow.retry_after)
        except Exception as exc:  # a preview is a courtesy: the answer still comes whole
            self._next_at = self.clock() + FAILURE_PAUSE
            log.warning("streaming.update_failed", transport=self.transport.name, error=str(exc))
