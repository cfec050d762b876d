"""What the chaos benchmark sends and sees, and how it is counted.

Every message is `<tag>-<chat>-<n>`, answered by the fake model with `echo: <message>`, so
each reply names its question. A message is lost when no reply names it; doubled when two
do, unless the outbox holds it once and a kill came between the two copies: that is the
send boundary (the platform took the reply, the daemon was killed before recording it
sent, and the next daemon sent it again), which no platform lets a sender close.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.chaos_platforms import Platform

WATCH_EVERY = 0.02
"""Seconds between two looks at what the platforms were sent: the resolution of the times."""
IN_FLIGHT = 1.0
"""How long after a daemon's death a reply it wrote may still reach a fake (the kernel holds
the bytes until the fake's thread reads them): a copy this close to a kill is its."""


@dataclass(frozen=True, slots=True)
class Said:
    """A message sent to the bot, or a reply it sent."""

    transport: str
    chat: str
    text: str
    at: float
    """time.time() when it was sent, or first seen."""


class Watch:
    """Every reply the platforms were sent, stamped when first seen."""

    def __init__(self, platforms: Sequence[Platform]) -> None:
        self.platforms = platforms
        self.seen: list[Said] = []
        self._counts = dict.fromkeys((p.name for p in platforms), 0)
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._thread.join()
        self._look()  # what came in since the last look

    def _run(self) -> None:
        while not self._halt.wait(WATCH_EVERY):
            self._look()

    def _look(self) -> None:
        for platform in self.platforms:
            replies = platform.replies()
            now = time.time()
            with self._lock:
                new = replies[self._counts[platform.name] :]
                self._counts[platform.name] = len(replies)
                self.seen.extend(Said(platform.name, chat, text, now) for chat, text in new)

    def replies(self) -> list[Said]:
        with self._lock:
            return list(self.seen)

    def wait(self, texts: Callable[[], set[str]], timeout: float) -> bool:
        """Until every one of `texts()` (message texts) has a reply, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answered = {s.text.removeprefix("echo: ") for s in self.replies()}
            if texts() <= answered:
                return True
            time.sleep(0.1)
        return False


class Traffic:
    """Numbered messages from the first `chats` chats of each platform, round robin, `rate`
    a second on each platform, whether or not a daemon is up to take them."""

    def __init__(self, tag: str, platforms: Sequence[Platform], *, chats: int, rate: float) -> None:
        self.tag = tag
        self.platforms = platforms
        self.chats = chats
        self.rate = rate
        self.sent: list[Said] = []
        self.failed: list[str] = []
        """Messages the platform could not deliver (no daemon took them): never sent."""
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(target=self._push, args=(p,), name=f"traffic-{p.name}", daemon=True)
            for p in platforms
        ]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join()

    def send(self, platform: Platform, chat: str, text: str) -> None:
        """One message, now; recorded as sent once the platform has it."""
        try:
            platform.send(chat, text)
        except Exception as exc:  # the platform refused or no daemon took it: not sent
            with self._lock:
                self.failed.append(f"{platform.name} {text}: {exc}")
            return
        with self._lock:
            self.sent.append(Said(platform.name, chat, text, time.time()))

    def _push(self, platform: Platform) -> None:
        start = time.monotonic()
        for i in range(10**9):
            if self._halt.wait(max(0.0, start + i / self.rate - time.monotonic())):
                return
            chat = platform.chat(i % self.chats)
            self.send(platform, chat, f"{self.tag}-{chat}-{i // self.chats + 1}")

    def texts(self) -> set[str]:
        with self._lock:
            return {s.text for s in self.sent}

    def before(self, at: float) -> list[str]:
        with self._lock:
            return [s.text for s in self.sent if s.at <= at]


@dataclass(kw_only=True, slots=True)
class Mark:
    """A fault's end, from which recovery is timed."""

    end: float
    """time.time() when the fault ended (a daemon started again, space freed, the model
    back, the clock stepped, the poison delivered)."""
    awaited: list[str] | None = None
    """The messages whose answers count for `all answered`; None: the backlog, those sent
    before the first answer after `end`."""


@dataclass(kw_only=True, slots=True)
class Count:
    sent: int = 0
    lost: int = 0
    doubled: int = 0
    """Messages answered by more than one reply, the send boundary aside."""
    resent: int = 0
    """Messages whose one reply was sent again across a kill (the send boundary)."""
    misordered: int = 0
    """Chats whose answers came in an order other than that of their messages."""
    other: int = 0
    """Replies that answer no message of the row (an error told, a stray)."""
    first_s: float | None = None
    """Worst over the faults: seconds from the fault's end to the first answer after it."""
    all_s: float | None = None
    """Worst over the faults: seconds from its end until all its awaited messages were
    answered (None if one never was)."""
    never: bool = False
    """Some awaited message was never answered."""
    resent_by_kill: list[int] = field(default_factory=list)
    """How many replies each kill had sent again."""
    lost_texts: list[str] = field(default_factory=list)
    doubled_texts: list[str] = field(default_factory=list)


def tally(
    sent: list[Said],
    seen: list[Said],
    *,
    outbox: Counter[str],
    arrived: dict[str, float],
    kills: Sequence[float] = (),
    marks: Sequence[Mark] = (),
) -> Count:
    """Count `sent` against `seen` (the replies); `outbox` is the rows per reply text and
    `arrived` when each message reached a daemon, as the store recorded them."""
    asked = {(s.transport, s.chat, "echo: " + s.text): s for s in sent}
    copies: dict[str, list[Said]] = defaultdict(list)
    count = Count(sent=len(sent), resent_by_kill=[0] * len(kills))
    place: dict[str, int] = {}  # each answered message's place among the replies (its first)
    for n, reply in enumerate(seen):
        if (reply.transport, reply.chat, reply.text) in asked:
            text = reply.text.removeprefix("echo: ")
            copies[text].append(reply)
            place.setdefault(text, n)
        else:
            count.other += 1
    for message in sent:
        got = copies.get(message.text, [])
        if not got:
            count.lost += 1
            count.lost_texts.append(message.text)
        elif len(got) > 1:
            first, last = got[0].at, got[-1].at
            across = [n for n, k in enumerate(kills) if first - IN_FLIGHT < k < last]
            if outbox["echo: " + message.text] == 1 and across:
                count.resent += 1
                count.resent_by_kill[across[0]] += 1
            else:
                count.doubled += 1
                count.doubled_texts.append(message.text)
    count.misordered = _misordered(sent, place, arrived)
    first_at = {text: replies[0].at for text, replies in copies.items()}
    for mark in marks:
        _recovery(count, mark, sent, first_at)
    return count


def _recovery(count: Count, mark: Mark, sent: list[Said], first_at: dict[str, float]) -> None:
    """Fold one fault's recovery times into the worst so far (`all_s` None once one of
    its awaited messages was never answered)."""
    later = [at for at in first_at.values() if at >= mark.end]
    back = min(later, default=float("inf"))
    if later:
        count.first_s = max(count.first_s or 0.0, back - mark.end)
    awaited = mark.awaited
    if awaited is None:
        awaited = [s.text for s in sent if s.at <= back]
    if any(text not in first_at for text in awaited):
        count.all_s = None
        count.never = True
    elif awaited and not count.never:
        took = max(0.0, max(first_at[t] for t in awaited) - mark.end)
        count.all_s = max(count.all_s or 0.0, took)


def _misordered(sent: list[Said], place: dict[str, int], arrived: dict[str, float]) -> int:
    """Chats whose first answers follow neither the order their messages were sent nor
    the order they reached the daemons (a platform sends an unacknowledged event again
    later, so it may arrive after its successors)."""
    chats: dict[tuple[str, str], list[Said]] = defaultdict(list)
    for message in sent:
        chats[(message.transport, message.chat)].append(message)
    out = 0
    for messages in chats.values():
        answered = [m for m in messages if m.text in place]
        got = sorted(answered, key=lambda m: place[m.text])
        if got == answered:
            continue
        reached = sorted(answered, key=lambda m: arrived.get(m.text, m.at))
        if got != reached:
            out += 1
    return out
