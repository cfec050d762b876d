"""Signal: malformed `receive` notifications from signal-cli never raise past the adapter
(which would end it, and signal-cli would not print them again) and are recorded when refused;
one sent through the fake signal-cli is skipped and the next message answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from structlog.testing import capture_logs

from rousseau.transports.signal import SignalTransport
from tests.fuzz.events import FUZZ, held, refusals, spoiled
from tests.transports.harness_signal import ACCOUNT, GROUP, SignalHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

PARAMS: dict[str, Any] = {
    "envelope": {
        "source": "+15551230001",
        "sourceNumber": "+15551230001",
        "sourceName": "Ann",
        "timestamp": 1700000000000,
        "dataMessage": {
            "timestamp": 1700000000000,
            "message": "\ufffc hello",
            "groupInfo": {"groupId": GROUP, "type": "DELIVER"},
            "mentions": [{"name": ACCOUNT, "number": ACCOUNT, "start": 0, "length": 1}],
            "attachments": [{"id": "1700-png", "contentType": "image/png", "size": 3}],
        },
    },
    "account": ACCOUNT,
}


def adapter(tmp: Path) -> SignalTransport:
    made = SignalTransport(ACCOUNT, extra_args=["--config", str(tmp)])
    made.media = object()  # type: ignore[assignment]  # only whether files are taken in
    return made


@given(spoiled(PARAMS))
@example({"envelope": {**PARAMS["envelope"], "timestamp": "soon"}})
@example({"envelope": {**PARAMS["envelope"], "dataMessage": {"message": 5}}})
@FUZZ
async def test_a_received_message_is_read_or_refused(tmp_path: Path, params: Any) -> None:
    with capture_logs() as logs:
        read = adapter(tmp_path)._received(params)
    held(read[0] if read else None, logs, "signal")


async def test_the_valid_message_is_read(tmp_path: Path) -> None:
    read = adapter(tmp_path)._received(PARAMS)
    assert read is not None
    inbound, files = read
    assert (inbound.text, inbound.mentioned, len(files)) == ("hello", True, 1)


async def test_a_malformed_message_is_skipped_and_the_next_answered(tmp_path: Path) -> None:
    harness = SignalHarness()
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
                poison = harness.envelope("poison", source=harness.owner)
                poison["envelope"]["dataMessage"]["mentions"] = "everyone"
                await anyio.to_thread.run_sync(harness._inject, poison)
                await anyio.to_thread.run_sync(harness.dm, "and this one?")
                answered = ["echo: and this one?"]
                await until(lambda: [m.text for m in harness.delivered()] == answered)
                counted = failed_inbound(d, "signal")
    finally:
        harness.close()
    assert [e["reason"] for e in refusals(logs, "signal")]
    assert not restarts(logs)
    assert counted == 1
