"""Replies streamed into the chats of the platforms whose adapters edit messages (Telegram,
Slack and Discord on their fakes, Matrix on the real Synapse): the answer grows in one
message, edited at most once a second, and ends as the model's answer exactly. The whole
daemon's streaming (kill -9, 429, /stop) is in tests/test_streaming.py."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import ScriptedProvider, text_reply
from rousseau.config import load_config
from tests.helpers import serving
from tests.transports.conformance import Harness
from tests.transports.test_conformance import act

pytestmark = pytest.mark.anyio

ANSWER = " ".join(f"word{i}" for i in range(120))


async def test_a_slow_answer_grows_in_one_message_that_ends_as_the_answer(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "shown"):
        pytest.skip(f"{harness.name}: its adapter sends replies whole (no message edits)")
    asked: list[float] = []

    def answer(request: Request) -> Response:
        asked.append(time.time())  # the first token follows at once
        return text_reply(ANSWER)

    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
        },
    )
    provider = ScriptedProvider(answer, chunk=24, pace=0.12)  # about 3.5 s of writing
    shown = harness.shown  # type: ignore[attr-defined]
    async with serving(harness.transport(), config, provider, [harness.owner]):
        await act(harness.dm, "tell me a long story")
        with anyio.fail_after(30):
            while await anyio.to_thread.run_sync(shown) != [ANSWER]:
                await anyio.sleep(0.2)
        await anyio.sleep(0.5)
    assert await anyio.to_thread.run_sync(shown) == [ANSWER]
    times = await anyio.to_thread.run_sync(harness.update_times)  # type: ignore[attr-defined]
    assert len(times) >= 3  # shown while written, then the final edit
    assert 0.9 <= times[0] - asked[0] < 3.0  # a second after the first token (loose: load)
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # one update a second


async def test_a_slack_429_on_an_update_waits_as_told_and_loses_nothing(tmp_path: Path) -> None:
    from tests.transports.harness_slack import SlackHarness

    harness = SlackHarness()
    harness.fake.rate_limit_updates = 1  # Retry-After: 2
    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
        },
    )
    provider = ScriptedProvider(ANSWER, chunk=24, pace=0.15)
    try:
        async with serving(harness.transport(), config, provider, [harness.owner]):
            await act(harness.dm, "tell me a long story")
            with anyio.fail_after(30):
                while harness.shown() != [ANSWER]:
                    await anyio.sleep(0.2)
    finally:
        harness.close()
    assert harness.fake.rate_limit_updates == 0  # the 429 was given
    times = harness.update_times()
    assert max(b - a for a, b in itertools.pairwise(times)) >= 2.0  # and obeyed
