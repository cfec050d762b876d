"""Delivery: one transport's outbox, sent by a task per chat.

Each chat's parts go out in order; chats never wait for each other, so a chat in a flood
wait, or a send that hangs until its deadline, holds up only that chat. A failed send is
retried with backoff; any other failure is logged and retried, never ending delivery.
"""

from __future__ import annotations

import time

import anyio
import structlog
from anyio.abc import TaskGroup

from rousseau.agent import StoreError
from rousseau.backoff import backoff
from rousseau.metrics import Metrics
from rousseau.state.protocol import DaemonStore
from rousseau.state.records import OutboxRow
from rousseau.transports.base import Throttled, Transport

log = structlog.get_logger("rousseau.router")

BATCH = 200
MAX_CHATS = 64
"""Chats sending at once; more wait for a free place (order holds within each chat)."""
COUNT_EVERY = 1.0
"""Under a steady flow, the outbox gauge is brought up to date at least this often (s)."""
GIVE_UP_AFTER = 12
"""Attempts of one part before it is marked failed (about a day of backoff)."""


class Courier:
    """Sends the outbox of one transport until cancelled."""

    def __init__(
        self,
        transport: Transport,
        state: DaemonStore,
        *,
        metrics: Metrics | None = None,
        send_timeout: float = 60.0,
    ) -> None:
        self.transport = transport
        self.state = state
        self.metrics = metrics or Metrics()
        self.send_timeout = send_timeout
        self._busy: set[str] = set()
        self._wake = anyio.Event()
        self._counted = time.monotonic()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        failures = 0
        async with anyio.create_task_group() as tg:
            while True:
                self._wake = anyio.Event()
                try:
                    wait = await self._round(tg)
                    failures = 0
                except Exception:  # the store failed: try again, never end delivery
                    failures += 1
                    log.exception("router.delivery_failed", transport=self.transport.name)
                    wait = min(30.0, 0.5 * 2**failures)
                if wait > 0:
                    with anyio.move_on_after(wait):
                        await self._wake.wait()

    async def _round(self, tg: TaskGroup) -> float:
        """Start a sender for each chat with due parts; how long to wait before looking again."""
        name = self.transport.name
        rows = await self.state.due(name, BATCH, skip=self._busy)
        chats: dict[str, list[OutboxRow]] = {}
        for row in rows:
            chats.setdefault(row.message.chat_id, []).append(row)
        for chat, chat_rows in chats.items():
            if len(self._busy) >= MAX_CHATS:
                break
            self._busy.add(chat)
            tg.start_soon(self._send_chat, chat, chat_rows)
        full = len(self._busy) >= MAX_CHATS
        if len(rows) == BATCH and not full:
            return 0.0  # more may be due behind this batch
        # A sender wakes the courier when it is done: until then, what its chat waits
        # for, or a free place, is no reason to look (and the count can wait for the
        # round it brings, up to a second under a steady flow).
        if rows and time.monotonic() < self._counted + COUNT_EVERY:
            return 5.0
        self._counted = time.monotonic()
        pending, next_at = await self.state.waiting(name, skip=self._busy)
        self.metrics.outbox_pending.labels(name).set(pending)
        if full or next_at is None:
            return 5.0
        return max(0.0, min(5.0, next_at - time.time()))

    async def _send_chat(self, chat: str, rows: list[OutboxRow]) -> None:
        try:
            for row in rows:
                if not await self._send(row):
                    return  # keep the order: this chat's later parts wait for this one
        except Exception:
            log.exception("router.delivery_failed", transport=self.transport.name, chat=chat)
        finally:
            self._busy.discard(chat)
            self.wake()  # this chat may have more, and the others a free place

    async def _send(self, row: OutboxRow) -> bool:
        transport = self.transport
        try:
            with anyio.fail_after(self.send_timeout):
                await transport.send(row.message)
        except Exception as exc:
            attempts = row.attempts + 1
            delay = backoff(attempts, cap=300.0)
            if isinstance(exc, Throttled):  # the platform said when: then, not a guess
                delay = min(max(exc.retry_after, 0.0), 300.0)
            give_up = attempts >= GIVE_UP_AFTER
            error = str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                error = f"no answer within {self.send_timeout:g} s"
            log.warning(
                "router.send_failed",
                transport=transport.name,
                attempt=attempts,
                retry_in=round(delay, 1),
                error=error,
                gave_up=give_up,
            )
            await self.state.retry_later(row.id, delay, error, give_up=give_up)
            return False
        self.metrics.replies.labels(transport.name).inc()
        # It went out: recording that must not fail lightly, or it would be sent again.
        for attempt in range(5):
            try:
                await self.state.sent(row.id)
                return True
            except StoreError:
                if attempt == 4:
                    raise
                await anyio.sleep(2.0**attempt)
        return True
