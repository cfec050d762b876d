"""The Router, in named stages: the core (intake, session queues, retries, lifecycle), the
chat commands, the turn runner, the sessions and the replies (DESIGN.md sections 1 and 2)."""

from rousseau.policy import ChatPolicy, RateLimiter
from rousseau.router.core import BROKEN_REPLY, Router, ShuttingDown
from rousseau.router.settings import RouterSettings
from rousseau.router.turns import FAILED_REPLY, TIMEOUT_REPLY

__all__ = [
    "BROKEN_REPLY",
    "FAILED_REPLY",
    "TIMEOUT_REPLY",
    "ChatPolicy",
    "RateLimiter",
    "Router",
    "RouterSettings",
    "ShuttingDown",
]
