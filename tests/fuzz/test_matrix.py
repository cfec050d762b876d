"""Matrix: malformed room events in a sync never raise past the adapter: what nio could not
parse at all is dropped from the sync before nio sees it (recorded), the rest is read or
refused (recorded). Through the real Synapse, a malformed message is skipped and the next
answered, the sync going on."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anyio
import nio
import pytest
from hypothesis import example, given
from structlog.testing import capture_logs

from rousseau.transports.matrix import MatrixTransport
from rousseau.transports.matrix_sync import drop_unparsable
from tests.fuzz.events import FUZZ, held, refusals, spoiled
from tests.matrix.synapse import Synapse
from tests.transports.harness_matrix import MatrixHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

BOT = "@bot:example.org"
ROOM = "!room:example.org"
EVENT: dict[str, Any] = {
    "type": "m.room.message",
    "sender": "@ann:example.org",
    "event_id": "$event1",
    "origin_server_ts": 1700000000000,
    "content": {
        "msgtype": "m.image",
        "body": "look at this",
        "filename": "a.png",
        "url": "mxc://example.org/abc",
        "info": {"mimetype": "image/png", "size": 3},
        "m.mentions": {"user_ids": [BOT]},
    },
    "unsigned": {"age": 5},
}
TEXT = {**EVENT, "content": {"msgtype": "m.text", "body": "hi bot"}}


def sync_of(*events: Any) -> dict[str, Any]:
    room = {
        "timeline": {"events": list(events), "limited": False, "prev_batch": "p1"},
        "state": {"events": []},
        "ephemeral": {"events": []},
        "account_data": {"events": []},
        "summary": {},
        "unread_notifications": {},
    }
    return {"next_batch": "s2", "rooms": {"join": {ROOM: room}, "invite": {}, "leave": {}}}


@given(spoiled(EVENT))
@example({**EVENT, "origin_server_ts": "yesterday"})
@example({**EVENT, "content": {**EVENT["content"], "body": 5}})
@example({**EVENT, "content": {**EVENT["content"], "m.mentions": ["junk"]}})
@example(["not", "an", "event"])
@FUZZ
async def test_a_synced_event_is_read_or_refused(event: Any) -> None:
    transport = MatrixTransport("http://127.0.0.1:9", BOT, access_token="secret")
    transport.media = object()  # type: ignore[assignment]  # only whether files are taken in
    client = transport._client_for()
    body = sync_of(copy.deepcopy(event), TEXT)
    with capture_logs() as logs:
        drop_unparsable(transport, body)
        reply = nio.SyncResponse.from_dict(body)  # nio parses what is left: never raises
        assert isinstance(reply, nio.SyncResponse), reply
        read = [transport._read(client, ROOM, e) for e in reply.rooms.join[ROOM].timeline.events]
    await client.close()
    assert read[-1] is not None and read[-1][0].text == "hi bot"  # the next one is read
    if len(read) == 2:
        held(read[0][0] if read[0] else None, logs, "matrix")


async def test_a_malformed_message_is_skipped_and_the_next_answered(
    synapse: Synapse, tmp_path: Path
) -> None:
    harness = MatrixHarness(synapse)
    with capture_logs() as logs:
        async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
            # Synapse checks body and m.mentions, not formatted_body; nio's schema does.
            poison = {"msgtype": "m.text", "body": "poison", "formatted_body": 5}
            await anyio.to_thread.run_sync(harness._send, harness.alice, harness.dm_chat, poison)
            await anyio.to_thread.run_sync(harness.dm, "and this one?")
            answered = ["echo: and this one?"]
            await until(lambda: [m.text for m in harness.delivered()] == answered)
            counted = failed_inbound(d, "matrix")
    harness.close()
    assert [e["reason"] for e in refusals(logs, "matrix")]
    assert not restarts(logs)
    assert counted == 1
