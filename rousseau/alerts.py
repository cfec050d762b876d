"""Alerts: what the owner must hear about, told in the chats of `alerts.deliver_to`, never
through the transport it is about. A transport down (not connected, or stopped) for
`alerts.after`, a disk nearly full, a store that cannot be written, and turns failing every
time for `alerts.after` are each told once, and once more when they are over; a budget
reached is told when the meter stops an agent. Something must stay wrong for the whole
`after` before it is told, the same thing is told at most once in QUIET (a flapping
connection: one alert, and one when it is back), and at most MAX_PER_HOUR alerts go out in
an hour whatever happens.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from rousseau.config import Config
from rousseau.log import duration
from rousseau.messages import KeyValue
from rousseau.metrics import Metrics

log = structlog.get_logger("rousseau.alerts")

CHECK_EVERY = 1.0
"""Seconds between looks at what is watched."""
PROBE_EVERY = 30.0
"""Seconds between writes that prove the store takes them."""
MAX_PER_HOUR = 20
QUIET = 600.0
"""Seconds after telling something went wrong during which the same thing going wrong
again is not told (a flapping connection: one alert, and one when it is back)."""
MIN_FREE = 200 * 1024 * 1024
"""Free bytes below which the disk is nearly full (or 1% of it, if that is less)."""
FAILED_TURNS = 3
"""Turns that must all have failed, over `after`, before the provider is told about."""

Notify = Callable[[str, str, str], Awaitable[Any]]
"""notify(transport, chat, text): queue a message (the router's)."""


@dataclass
class _Watched:
    since: float | None = None
    """When it went wrong (None: it is fine)."""
    told: bool = False
    last: float = -QUIET
    """When it was last told as gone wrong."""


@dataclass
class Alerts:
    config: Callable[[], Config]
    """The running config (read at each look: a reload changes what is watched)."""
    notify: Notify
    states: Callable[[], dict[str, dict[str, Any]]]
    """Each transport: connected, and why it stopped if it did (the daemon's view)."""
    connected: Callable[[str], bool]
    metrics: Metrics
    kv: KeyValue | None = None
    """Where the store is written to prove it takes writes."""
    folders: Iterable[Path] = ()
    """What the disk check looks at (the state's folder, the media folder)."""
    sent: deque[float] = field(default_factory=deque)
    _watched: dict[str, _Watched] = field(default_factory=dict)
    _turns: tuple[float, float] = (0.0, 0.0)
    _streak: float = 0.0
    _streak_since: float | None = None
    _probed: float = 0.0
    _store_error: str = ""

    async def run(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:  # a look that fails is logged, never the daemon's end
                log.warning("alerts.look_failed", error=str(exc) or type(exc).__name__)
            await anyio.sleep(CHECK_EVERY)

    async def look(self) -> None:
        after = self.config().alerts.after
        now = time.monotonic()
        for name, state in self.states().items():
            down = not state.get("connected") or "stopped" in state
            detail = str(state.get("stopped") or state.get("error") or "not connected")
            await self._watch(
                f"transport:{name}",
                down,
                now,
                after,
                down=f"⚠️ {name} has been down for {{for}} ({detail}). rousseau keeps trying "
                "to reconnect; what is sent there meanwhile waits.",
                back=f"✅ {name} is back (it was down for {{for}}).",
                avoid=name,
            )
        await self._watch_disk(now)
        await self._watch_store(now)
        await self._watch_turns(now, after)

    async def _watch_disk(self, now: float) -> None:
        for folder in self.folders:
            try:
                usage = await anyio.to_thread.run_sync(shutil.disk_usage, folder)
            except OSError:
                continue
            full = usage.free < min(MIN_FREE, usage.total // 100)
            free = f"{usage.free // (1024 * 1024)} MiB"
            await self._watch(
                f"disk:{folder}",
                full,
                now,
                0.0,
                down=f"⚠️ The disk holding {folder} is nearly full ({free} free): messages "
                "cannot be kept once it is.",
                back=f"✅ The disk holding {folder} has room again.",
            )

    async def _watch_store(self, now: float) -> None:
        if self.kv is not None and now - self._probed >= PROBE_EVERY:
            self._probed = now
            try:
                await self.kv.set("probe", str(time.time()))
                self._store_error = ""
            except Exception as exc:
                self._store_error = str(exc) or type(exc).__name__
        await self._watch(
            "store",
            bool(self._store_error),
            now,
            0.0,
            down=f"⚠️ The store cannot be written ({self._store_error}): messages are not "
            "being kept.",
            back="✅ The store can be written again.",
        )

    async def _watch_turns(self, now: float, after: float) -> None:
        """Turns failing every time (the model provider down, or its key revoked): at
        least FAILED_TURNS in a row, the first of them `after` ago."""
        turns, errors = _total(self.metrics.turn_seconds, "_count"), _total(self.metrics.errors)
        seen_turns, seen_errors = self._turns
        self._turns = (turns, errors)
        if (turns - errors) > (seen_turns - seen_errors):  # one answered since the last look
            self._streak, self._streak_since = 0.0, None
        if errors > seen_errors:
            self._streak += errors - seen_errors
            self._streak_since = self._streak_since or now
        since = self._streak_since
        failing = since is not None and self._streak >= FAILED_TURNS and now - since >= after
        await self._watch(
            "provider",
            failing,
            now,
            0.0,
            down=f"⚠️ The last {int(self._streak)} turns all failed: is the model provider "
            "down, or its key revoked? See the daemon's log.",
            back="✅ Model calls succeed again.",
        )

    async def _watch(
        self,
        subject: str,
        wrong: bool,
        now: float,
        after: float,
        *,
        down: str,
        back: str,
        avoid: str = "",
    ) -> None:
        """Told once `subject` has been `wrong` for `after` (`down`), and again when it is
        right again (`back`); {for} in them is how long it lasted."""
        watched = self._watched.setdefault(subject, _Watched())
        if wrong:
            if watched.since is None:
                watched.since = now
            if not watched.told and now - watched.since >= after and now - watched.last >= QUIET:
                lasted = duration(now - watched.since)
                watched.told = await self.tell(down.replace("{for}", lasted), avoid)
                watched.last = now
            return
        if watched.since is not None and watched.told:
            await self.tell(back.replace("{for}", duration(now - watched.since)), avoid)
        watched.since, watched.told = None, False

    async def budget(self, text: str, told: list[str]) -> None:
        """A budget reached (the meter's notice), told in the alert chats too (but those of
        `told`, its owners', which have it already)."""
        await self.tell(text, "", skip=frozenset(told))

    async def tell(self, text: str, avoid: str, *, skip: frozenset[str] = frozenset()) -> bool:
        """`text` queued for each alert chat not on `avoid` (those connected now first: one
        that is down gets it when it is back); False when the hour's alerts are spent or
        there is nowhere to tell."""
        now = time.monotonic()
        while self.sent and self.sent[0] < now - 3600:
            self.sent.popleft()
        if len(self.sent) >= MAX_PER_HOUR:
            log.warning("alert.held", text=text[:80], reason="too many alerts this hour")
            return True  # held back, but counted as told: it is not retried every second
        split = [t.partition(":") for t in self.config().alerts.deliver_to]
        targets = [
            (tr, chat) for tr, _, chat in split if tr != avoid and f"{tr}:{chat}" not in skip
        ]
        if not targets:
            log.warning("alert.nowhere", text=text[:80], hint="set alerts.deliver_to")
            return True
        up = [t for t in targets if self.connected(t[0])] or targets
        self.sent.append(now)
        for transport, chat in up:
            try:
                await self.notify(transport, chat, text)
            except Exception as exc:
                log.warning("alert.failed", transport=transport, error=str(exc))
        log.warning("alert.sent", text=text[:120], to=[f"{t}:{c}" for t, c in up])
        return True


def _total(metric: Any, suffix: str = "_total") -> float:
    """The sum of a metric's samples ending in `suffix`, across its labels."""
    return float(
        sum(s.value for m in metric.collect() for s in m.samples if s.name.endswith(suffix))
    )
