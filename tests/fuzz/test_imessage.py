"""iMessage: malformed messages from a BlueBubbles query never raise past the adapter and
are recorded when refused; one served by the fake BlueBubbles server is passed by the cursor
at once and the next message answered."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from structlog.testing import capture_logs

from rousseau.transports.imessage import IMessageTransport, _unseen
from tests.fuzz.events import FUZZ, held, refusals, spoiled
from tests.transports.harness_imessage import IMessageHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

MESSAGE: dict[str, Any] = {
    "guid": "msg-1",
    "text": "\ufffc@rousseau hello",
    "isFromMe": False,
    "isAudioMessage": False,
    "dateCreated": 1700000000000,
    "handle": {"address": "+15551230001"},
    "chats": [{"guid": "iMessage;+;chat424242"}],
    "attachments": [
        {"guid": "att-1", "transferName": "a.png", "mimeType": "image/png", "totalBytes": 3}
    ],
}


def adapter() -> IMessageTransport:
    made = IMessageTransport("http://127.0.0.1:9", "secret")
    made.media = object()  # type: ignore[assignment]  # only whether files are taken in
    return made


@given(spoiled(MESSAGE))
@example({**MESSAGE, "chats": "iMessage;-;+1555"})
@example({**MESSAGE, "dateCreated": "yesterday"})
@FUZZ
async def test_a_queried_message_is_read_or_refused(message: Any) -> None:
    with capture_logs() as logs:
        read = adapter()._read(message)
        _unseen(message, {"at": 1700000000000, "guids": []})  # the cursor reads it too
    held(read[0] if read else None, logs, "imessage")


async def test_the_valid_message_is_read() -> None:
    read = adapter()._read(MESSAGE)
    assert read is not None
    assert (read[0].text, read[0].mentioned, len(read[1])) == ("@rousseau hello", True, 1)


async def test_a_malformed_message_is_passed_and_the_next_answered(tmp_path: Path) -> None:
    harness = IMessageHarness()
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
                at = int(time.time() * 1000) + 1
                poison = {**MESSAGE, "guid": "poison", "chats": "not a list", "dateCreated": at}
                harness.server.add(poison)
                await anyio.to_thread.run_sync(harness.dm, "and this one?")
                answered = ["echo: and this one?"]
                await until(lambda: [m.text for m in harness.delivered()] == answered)
                counted = failed_inbound(d, "imessage")
    finally:
        harness.close()
    assert [e["reason"] for e in refusals(logs, "imessage")]
    assert not restarts(logs)
    assert counted == 1
