"""Capped exponential backoff with jitter, for every retry loop of the daemon."""

from __future__ import annotations

import random


def backoff(attempt: int, *, cap: float, base: float = 1.0) -> float:
    """Seconds to wait before try `attempt + 1`: `base * 2**attempt`, at most `cap`, spread
    by ±50% so that many failures at once do not retry in step."""
    return min(cap, base * 2.0**attempt) * random.uniform(0.5, 1.5)
