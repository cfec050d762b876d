from __future__ import annotations

import gc
import subprocess
import warnings
from collections.abc import Iterator

import pytest

from tests.fakes.llm import FakeLLMServer

# neonize runs `os.popen("uname -a")` at import and never closes it. The Popen parks itself
# in subprocess's list of unreaped children until some later Popen reaps it, and the unclosed
# pipe then fails whichever test that was. Reap it here, quietly, once.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ResourceWarning)
    try:
        import neonize.aioze.events  # noqa: F401
    except ImportError:
        pass
    for child in list(getattr(subprocess, "_active", None) or []):
        child.wait()
    subprocess._cleanup()  # type: ignore[attr-defined]
    gc.collect()


@pytest.fixture
def anyio_backend() -> str:
    # The vendor SDKs are asyncio-only, and so is the daemon's event loop.
    return "asyncio"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer().start()
    yield server
    server.stop()
