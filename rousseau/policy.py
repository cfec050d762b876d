"""Admission: whether an inbound message is taken, answered without a turn, or dropped.

Decided once, here, in a fixed order: a group message that does not address the bot; a
duplicate delivery (dropped before it costs anything); a stranger; the sender's rate limit.
The router acts on the one verdict this returns (an owner's approval answer is looked for
before, among the router's commands).
"""

from __future__ import annotations

import enum
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from rousseau.messages import Inbound
from rousseau.state.protocol import DaemonStore

if TYPE_CHECKING:
    from rousseau.config import Config

log = structlog.get_logger("rousseau.router")

PAIRING_TTL = 3600.0
PAIRING_REPLY_EVERY = 600.0
"""A stranger is told their code at most once in this long; other messages get no reply."""
PAIRING_REPLIES = (30, 60.0)
"""Pairing replies on one transport at most, per so many seconds, all strangers together: a
flood of new senders gets this many answers, not one each."""
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I


@dataclass(kw_only=True, slots=True)
class ChatPolicy:
    """Who may talk to the agent on one transport, and how it answers there."""

    policy: str = "allowlist"
    allowlist: frozenset[str] = frozenset()
    require_mention: bool = True
    reply_header: str = ""


class Verdict(enum.Enum):
    TURN = "turn"
    """Persisted as pending: run a turn and answer it."""
    ANSWER = "answer"
    """Persisted as handled: send `Admitted.reply` (no turn)."""
    DROP = "drop"
    """Nothing to do (a duplicate, a group message not for us, an ignored stranger)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Admitted:
    verdict: Verdict
    reply: str = ""


_DROP = Admitted(verdict=Verdict.DROP)


class RateLimiter:
    """A token bucket per (transport, sender); the least recently seen keys are dropped."""

    def __init__(
        self, default: tuple[int, float], per_transport: dict[str, tuple[int, float]], max_keys: int
    ) -> None:
        self.default = default
        self.per_transport = per_transport
        self.max_keys = max_keys
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def allow(self, transport: str, sender: str, now: float | None = None) -> bool:
        count, period = self.per_transport.get(transport, self.default)
        now = time.monotonic() if now is None else now
        key = (transport, sender)
        tokens, last = self._buckets.pop(key, (float(count), now))
        tokens = min(float(count), tokens + (now - last) * count / period)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return allowed

    def refund(self, transport: str, sender: str) -> None:
        """Give back the token `allow` took (the message turned out to be a duplicate)."""
        count, _ = self.per_transport.get(transport, self.default)
        found = self._buckets.get((transport, sender))
        if found is not None:
            self._buckets[(transport, sender)] = (min(float(count), found[0] + 1.0), found[1])

    def __len__(self) -> int:
        return len(self._buckets)


class Bounded:
    """An LRU set: remembers the last `limit` keys."""

    def __init__(self, limit: int) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def add(self, key: str) -> bool:
        """True if the key is new."""
        new = key not in self._keys
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._limit:
            self._keys.popitem(last=False)
        return new


class Admission:
    """The one place an inbound is let in (or not)."""

    def __init__(
        self,
        *,
        state: DaemonStore,
        policies: dict[str, ChatPolicy],
        rate_limiter: RateLimiter,
        denied_reply: str = "",
    ) -> None:
        self.state = state
        self.policies = policies
        self.rate_limiter = rate_limiter
        self.denied_reply = denied_reply
        self._strangers = Bounded(10_000)
        self._denied = Bounded(10_000)
        self._told: OrderedDict[tuple[str, str], float] = OrderedDict()
        """(transport, sender) -> when they were last told their pairing code (LRU-bounded)."""
        self._pairing_replies = RateLimiter(PAIRING_REPLIES, {}, max_keys=1000)
        """One bucket per transport, shared by every stranger on it."""

    def policy(self, transport: str) -> ChatPolicy:
        return self.policies.get(transport, ChatPolicy())

    async def decide(self, inbound: Inbound) -> Admitted:
        """The verdict for one inbound; anything taken is persisted before this returns."""
        policy = self.policy(inbound.transport)
        if inbound.is_group and policy.require_mention and not inbound.mentioned:
            log.debug("router.ignored_group", transport=inbound.transport, chat=inbound.chat_id)
            return _DROP
        if not await self._admitted(inbound, policy):
            if not await self.state.accept(inbound, ignored=True):
                return _DROP
            return await self._stranger(inbound, policy)
        allowed = self.rate_limiter.allow(inbound.transport, inbound.sender_id)
        if not await self.state.accept(inbound, ignored=not allowed):
            # Seen before (a redelivery after a restart): it costs the sender nothing.
            if allowed:
                self.rate_limiter.refund(inbound.transport, inbound.sender_id)
            log.info("router.duplicate", transport=inbound.transport, message=inbound.message_id)
            return _DROP
        if allowed:
            return Admitted(verdict=Verdict.TURN)
        log.info("router.rate_limited", transport=inbound.transport, sender=inbound.sender_id)
        minute = int(time.time() // 60)
        if self.denied_reply and self._denied.add(f"{inbound.session_key}:{minute}"):
            return Admitted(verdict=Verdict.ANSWER, reply=self.denied_reply)
        return _DROP

    async def takes_files(self, inbound: Inbound) -> bool:
        """Whether this sender's files may be downloaded at all: one who is let in, in a
        chat where the message is for the bot (a stranger's files never reach the disk)."""
        policy = self.policy(inbound.transport)
        if inbound.is_group and policy.require_mention and not inbound.mentioned:
            return False
        return await self._admitted(inbound, policy)

    async def admits(self, inbound: Inbound) -> bool:
        """Whether the sender is let in on the message's transport (mention or not)."""
        return await self._admitted(inbound, self.policy(inbound.transport))

    async def _admitted(self, inbound: Inbound, policy: ChatPolicy) -> bool:
        if policy.policy == "open" or inbound.sender_id in policy.allowlist:
            return True
        return await self.state.is_allowed(inbound.transport, inbound.sender_id)

    async def _stranger(self, inbound: Inbound, policy: ChatPolicy) -> Admitted:
        if policy.policy == "pairing":
            return await self._pairing(inbound)
        if self._strangers.add(f"{inbound.transport}:{inbound.sender_id}"):
            log.warning(
                "router.ignored_sender",
                transport=inbound.transport,
                sender=inbound.sender_id,
                hint=f"to admit them, add {inbound.sender_id!r} to {inbound.transport}.allowlist"
                f" or set {inbound.transport}.policy: pairing",
            )
        return _DROP

    async def _pairing(self, inbound: Inbound) -> Admitted:
        """A stranger is told their one code at most once per PAIRING_REPLY_EVERY; messages
        in between are dropped before they cost a write. A flood of strangers makes room for
        a newcomer (see DaemonState.pairing_code)."""
        transport, sender = inbound.transport, inbound.sender_id
        key = (transport, sender)
        now = time.monotonic()
        told = self._told.get(key)
        if told is not None and now - told < PAIRING_REPLY_EVERY:
            log.debug("router.pairing_quiet", transport=transport, sender=sender)
            return _DROP
        if not self._pairing_replies.allow(transport, ""):  # not told: a later message may be
            if self._denied.add(f"{transport}:pairing:{int(time.time() // 60)}"):
                log.warning(
                    "router.pairing_flood",
                    transport=transport,
                    hint="many strangers are writing at once: pairing replies are rate-limited",
                )
            return _DROP
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        grant = await self.state.pairing_code(transport, sender, inbound.chat_id, code, PAIRING_TTL)
        self._told[key] = now  # a rejected sender, too, costs nothing for a while
        self._told.move_to_end(key)
        while len(self._told) > 10_000:
            self._told.popitem(last=False)
        if grant is None:
            log.info("router.pairing_rejected", transport=transport, sender=sender)
            return _DROP
        if grant.evicted is not None:
            log.warning(
                "router.pairing_full",
                transport=transport,
                evicted=grant.evicted.sender_id,
                hint="many strangers are asking to pair: see `rousseau pair list`",
            )
        log.info("router.pairing_code", transport=transport, sender=sender, new=grant.new)
        return Admitted(
            verdict=Verdict.ANSWER,
            reply=f"I don't know you yet. Ask my owner to run: rousseau pair approve {grant.code}\n"
            "(the code is valid for one hour)",
        )


def chat_policies(config: Config) -> dict[str, ChatPolicy]:
    """The policy of each configured transport section."""
    out: dict[str, ChatPolicy] = {}
    for name, section in config.transport_sections().items():
        out[name] = ChatPolicy(
            policy=section.policy,
            allowlist=frozenset(section.allowlist),
            require_mention=section.require_mention,
            reply_header=section.reply_header,
        )
    if config.web is not None:  # the web face admits by its own login
        out["web"] = out["api"] = ChatPolicy(policy="open")
    return out
