"""WhatsApp: message events as neonize hands them up (protobuf, so every field has its type,
but any value) never raise past the adapter and are recorded when refused; one the fake
client delivers is skipped and the next message answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from rousseau.transports.whatsapp import WhatsAppTransport
from tests.fakes.whatsapp import OWN_LID, OWN_PHONE, FakeWhatsAppClient
from tests.fuzz.events import FUZZ, held, refusals
from tests.transports.harness_whatsapp import GROUP, WhatsAppHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

texts = st.one_of(
    st.text(st.characters(categories=("L", "N", "P", "S", "Zs", "Cc")), max_size=12),
    st.sampled_from(["", ":", "@", "a@b@c", "x" * 100_000, f"{OWN_LID}:3@lid", "\x00"]),
)
SOURCE = "Info.MessageSource"
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "Info.ID": texts,
    "Info.Pushname": texts,
    "Info.Timestamp": st.integers(-(2**63), 2**63 - 1),
    f"{SOURCE}.Sender.User": texts,
    f"{SOURCE}.Sender.Server": texts,
    f"{SOURCE}.SenderAlt.User": texts,
    f"{SOURCE}.SenderAlt.Server": st.sampled_from(["lid", "s.whatsapp.net", ""]),
    f"{SOURCE}.Chat.User": texts,
    f"{SOURCE}.Chat.Server": st.sampled_from(["g.us", "s.whatsapp.net", "lid", "", "x"]),
    f"{SOURCE}.IsGroup": st.booleans(),
    f"{SOURCE}.IsFromMe": st.booleans(),
    "Message.conversation": texts,
    "Message.extendedTextMessage.text": texts,
    "Message.extendedTextMessage.contextInfo.participant": texts,
    "Message.extendedTextMessage.contextInfo.mentionedJID": st.lists(texts, max_size=3),
    "Message.imageMessage.caption": texts,
    "Message.imageMessage.mimetype": texts,
    "Message.imageMessage.fileLength": st.integers(0, 2**64 - 1),
    "Message.audioMessage.seconds": st.integers(0, 2**32 - 1),
    "Message.audioMessage.PTT": st.booleans(),
    "Message.documentWithCaptionMessage.message.documentMessage.fileName": texts,
}


def spoil(event: Any, path: str, value: Any) -> None:
    *parents, name = path.split(".")
    target = event
    for parent in parents:
        target = getattr(target, parent)
    if isinstance(value, list):
        getattr(target, name).extend(value)
    else:
        setattr(target, name, value)


changes = st.lists(
    st.sampled_from(sorted(FIELDS)).flatmap(lambda p: FIELDS[p].map(lambda v: (p, v))),
    min_size=1,
    max_size=4,
)


@given(st.sampled_from(["text", "group", "file"]), changes)
@FUZZ
async def test_a_message_event_is_read_or_refused(
    kind: str, spoiled: list[tuple[str, Any]]
) -> None:
    client = FakeWhatsAppClient()
    transport = WhatsAppTransport(client)
    transport.media = object()  # type: ignore[assignment]  # only whether files are taken in
    if kind == "file":
        event = client.message("look", file=("a.png", "image/png", b"png"))
    elif kind == "group":
        event = client.message("hi", chat=(GROUP, "g.us"), mentions=[f"{OWN_PHONE}@s.whatsapp.net"])
    else:
        event = client.message("hello")
    for path, value in spoiled:
        spoil(event, path, value)
    with capture_logs() as logs:
        read = await transport._read(event)
    held(read[0] if read else None, logs, "whatsapp")


async def test_a_message_with_no_id_is_skipped_and_the_next_answered(tmp_path: Path) -> None:
    harness = WhatsAppHarness()
    with capture_logs() as logs:
        async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
            poison = harness.client.message("poison", sender=harness.owner, message_id="")
            poison.Info.ID = ""
            await anyio.to_thread.run_sync(harness.client.deliver, poison)
            await anyio.to_thread.run_sync(harness.dm, "and this one?")
            answered = ["echo: and this one?"]
            await until(lambda: [m.text for m in harness.delivered()] == answered)
            counted = failed_inbound(d, "whatsapp")
    assert [e["reason"] for e in refusals(logs, "whatsapp")]
    assert not restarts(logs)
    assert counted == 1
