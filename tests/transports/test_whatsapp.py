"""WhatsApp specifics through the fake neonize client: JIDs, LIDs, self-chat, groups, logouts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.messages import Inbound
from rousseau.transports.whatsapp import WhatsAppTransport
from tests.fakes.whatsapp import OWN_LID, OWN_PHONE, FakeWhatsAppClient
from tests.transports.harness_whatsapp import WhatsAppHarness
from tests.transports.test_conformance import act, daemon, delivered

pytestmark = pytest.mark.anyio


@pytest.fixture
def harness() -> Iterator[WhatsAppHarness]:
    yield WhatsAppHarness()


async def take(client: FakeWhatsAppClient, *events: object) -> list[Inbound]:
    """Run the adapter on `events`; return what it handed to the router."""
    transport = WhatsAppTransport(client)
    seen: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        seen.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(transport.run, handler)
        for event in events:
            await client.emit(event)
        await transport.stop()
    return seen


async def test_device_suffix_dropped_and_lid_mapped_to_the_phone() -> None:
    client = FakeWhatsAppClient()
    seen = await take(
        client,
        client.message("from a linked device", sender="15551230001", device=12),
        # An event that carries both identities teaches the map...
        client.message(
            "first",
            sender="99887766",
            sender_server="lid",
            sender_alt=("15551230002", "s.whatsapp.net"),
        ),
        # ...so a later LID-only event resolves to the phone number.
        client.message("second", sender="99887766", sender_server="lid", chat=("99887766", "lid")),
    )
    assert [(i.sender_id, i.chat_id) for i in seen] == [
        ("15551230001", "15551230001@s.whatsapp.net"),
        ("15551230002", "15551230002@s.whatsapp.net"),
        ("15551230002", "15551230002@s.whatsapp.net"),
    ]


async def test_self_chat_counts_but_own_messages_elsewhere_and_echoes_do_not() -> None:
    client = FakeWhatsAppClient()
    transport = WhatsAppTransport(client)
    seen: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        seen.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(transport.run, handler)
        await client.emit(
            client.message(
                "note to self", sender=OWN_PHONE, chat=(OWN_PHONE, "s.whatsapp.net"), from_me=True
            )
        )
        await client.emit(
            client.message(
                "to a friend",
                sender=OWN_PHONE,
                chat=("15551230001", "s.whatsapp.net"),
                from_me=True,
            )
        )
        from rousseau.messages import Outbound

        await transport.send(
            Outbound(transport="whatsapp", chat_id=f"{OWN_PHONE}@s.whatsapp.net", text="the answer")
        )
        await client.emit(
            client.message(
                "the answer",
                sender=OWN_PHONE,
                from_me=True,
                chat=(OWN_PHONE, "s.whatsapp.net"),
                message_id=client.sent_ids[-1],
            )
        )
        await transport.stop()
    assert [i.text for i in seen] == ["note to self"]
    assert seen[0].sender_id == OWN_PHONE and not seen[0].is_group
    # Typing is switched off after the answer goes out.
    assert client.presence[-1] == (f"{OWN_PHONE}@s.whatsapp.net", False)


async def test_groups_answer_only_when_the_bot_is_mentioned() -> None:
    client = FakeWhatsAppClient()
    group = ("120363000000000009", "g.us")
    seen = await take(
        client,
        client.message("chatter", chat=group, extended=True),
        client.message("@bot hi", chat=group, mentions=[f"{OWN_PHONE}@s.whatsapp.net"]),
        client.message("@bot by lid", chat=group, mentions=[f"{OWN_LID}@lid"]),
    )
    assert [(i.is_group, i.mentioned) for i in seen] == [(True, False), (True, True), (True, True)]
    assert {i.chat_id for i in seen} == {"120363000000000009@g.us"}


async def test_logged_out_stops_retrying_and_transient_disconnects_reconnect(
    harness: WhatsAppHarness, tmp_path: Path
) -> None:
    client = harness.client
    with capture_logs() as logs:
        async with daemon(harness, tmp_path):
            await act(client.disconnected)
            with anyio.fail_after(10):
                while client.connects < 2:
                    await anyio.sleep(0.05)
            await act(harness.dm, "after a blip")
            await delivered(harness, 1)
            await act(client.logged_out)
            await anyio.sleep(2.5)  # long enough for a retry, were one coming
            assert client.connects == 2
    events = [e["event"] for e in logs]
    assert "whatsapp.logged_out" in events and "transport.stopped" in events
    stopped = next(e for e in logs if e["event"] == "transport.stopped")
    assert "rousseau whatsapp login" in str(stopped["error"])


class Recorder:
    """Where neonize's client would upload and send: records what it is given."""

    def __init__(self) -> None:
        self.uploads: list[tuple[bytes, object]] = []
        self.messages: list[tuple[object, object]] = []

    async def upload(self, data: bytes, media_type: object) -> object:
        from neonize.proto.Neonize_pb2 import UploadResponse

        self.uploads.append((data, media_type))
        return UploadResponse(url="https://mmg.example/x", DirectPath="/x", FileLength=len(data))

    async def send_message(self, to: object, message: object) -> object:
        from types import SimpleNamespace

        self.messages.append((to, message))
        return SimpleNamespace(ID="OUT1")


async def test_files_go_out_as_image_or_document_messages_without_a_thumbnail(
    tmp_path: Path,
) -> None:
    from neonize.utils.enum import MediaType

    from rousseau.transports.whatsapp import NeonizeClient

    client = NeonizeClient(str(tmp_path / "session.db"))
    recorder = Recorder()
    client._client = recorder  # type: ignore[assignment]
    jid = "15551230001@s.whatsapp.net"
    png = b"\x89PNG not decoded here"
    await client.send_file(
        jid, png, media_type="image/png", name="chart.png", caption="November", image=True
    )
    await client.send_file(
        jid, b"a,b\n", media_type="text/csv", name="table.csv", caption="", image=False
    )
    assert [m for _, m in recorder.uploads] == [MediaType.MediaImage, MediaType.MediaDocument]
    (_, photo), (_, document) = recorder.messages
    image = photo.imageMessage  # type: ignore[attr-defined]
    assert (image.caption, image.mimetype, image.URL) == (
        "November",
        "image/png",
        "https://mmg.example/x",
    )
    assert not image.JPEGThumbnail  # nothing decoded on the host
    doc = document.documentMessage  # type: ignore[attr-defined]
    assert (doc.fileName, doc.mimetype, doc.HasField("caption")) == ("table.csv", "text/csv", False)
