from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.llm import FakeLLMServer


@pytest.fixture
def anyio_backend() -> str:
    # The vendor SDKs are asyncio-only, and so is the daemon's event loop.
    return "asyncio"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer().start()
    yield server
    server.stop()
