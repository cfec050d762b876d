"""Provider SDK clients opened by a test, closed after it (an open httpx client warns at exit)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest

P = TypeVar("P")
OPEN: list[Any] = []


def track(provider: P) -> P:
    """Close this provider's client when the test ends."""
    OPEN.append(provider)
    return provider


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().aclose()
