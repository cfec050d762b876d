"""`ack_reaction`: where the platform has reactions, a message taken in for a turn gets one
before the answer (a receipt), through the adapter's SDK on each platform's fake (Matrix on
the real Synapse); a stranger's ignored message gets none."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from rousseau.agent.testing import ScriptedProvider
from rousseau.config import load_config
from tests.helpers import serving
from tests.transports.conformance import Harness
from tests.transports.test_conformance import act

pytestmark = pytest.mark.anyio


async def test_a_message_taken_in_gets_the_receipt_reaction(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "reactions"):
        pytest.skip(f"{harness.name}: the platform has no reactions for bots here")
    named = {"slack": "eyes", "mattermost": "eyes", "feishu": "GLANCE"}  # named there
    emoji = named.get(harness.name, "👀")
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "agent": {"workspace": str(tmp_path / "ws")},
                "state": {"path": str(tmp_path / "s.db")},
                harness.name: {"ack_reaction": emoji},
            },
            ensure_ascii=False,  # YAML reads no surrogate pairs
        )
    )
    config = load_config(str(path), {"HOME": str(tmp_path)})
    reactions = harness.reactions  # type: ignore[attr-defined]
    provider = ScriptedProvider("the answer")
    async with serving(harness.transport(), config, provider, [harness.owner]):
        await act(harness.dm, "hello", sender=harness.stranger)  # ignored: no receipt
        await act(harness.dm, "hello")
        with anyio.fail_after(20):
            while not await anyio.to_thread.run_sync(reactions):
                await anyio.sleep(0.1)
        await anyio.sleep(0.5)
        found = await anyio.to_thread.run_sync(reactions)
    assert [e for _, e in found] == [emoji]  # once, on the owner's message
    assert found[0][0]  # on a message of theirs
