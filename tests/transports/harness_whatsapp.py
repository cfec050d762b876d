"""The WhatsApp adapter's harness: the adapter with a fake neonize client."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.whatsapp import MAX_LENGTH, WhatsAppTransport
from tests.fakes.whatsapp import OWN_PHONE, FakeWhatsAppClient
from tests.transports.conformance import Delivered, DeliveredFile, File

GROUP = "120363000000000001"


class WhatsAppHarness:
    name = "whatsapp"
    owner = "15551230001"
    stranger = "15556660666"
    dm_chat = f"{owner}@s.whatsapp.net"
    group_chat = f"{GROUP}@g.us"
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 64_000_000

    def __init__(self) -> None:
        self.client = FakeWhatsAppClient()
        self._last: Any = None

    def transport(self) -> Transport:
        return WhatsAppTransport(self.client)

    def dm(self, text: str, *, sender: str | None = None) -> None:
        self._last = self.client.message(text, sender=sender or self.owner)
        self.client.deliver(self._last)

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        self._last = self.client.message(
            text,
            sender=sender or self.owner,
            file=(file.name, file.media_type, file.data),
            voice_seconds=file.seconds if file.voice else 0,
        )
        self.client.deliver(self._last)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        self._last = self.client.message(
            text,
            sender=self.owner,
            file=(file.name, file.media_type, file.data),
            declared=declared,
        )
        self.client.deliver(self._last)

    def served_whole(self) -> bool | None:
        return None  # neonize hands the file over whole: nothing to cut short

    def group(self, text: str, *, mentioned: bool) -> None:
        mentions = [f"{OWN_PHONE}@s.whatsapp.net"] if mentioned else None
        self._last = self.client.message(
            text, sender=self.owner, chat=(GROUP, "g.us"), mentions=mentions, extended=True
        )
        self.client.deliver(self._last)

    def mention_after(self, before: str, text: str) -> None:
        # WhatsApp shows the mention as @phone in the text and lists the JID beside it.
        self._last = self.client.message(
            f"{before}@{OWN_PHONE} {text}",
            sender=self.owner,
            chat=(GROUP, "g.us"),
            mentions=[f"{OWN_PHONE}@s.whatsapp.net"],
        )
        self.client.deliver(self._last)

    def own_message(self, text: str) -> None:
        # The account writing in someone else's chat from another device: not for us.
        self.client.deliver(
            self.client.message(
                text, sender=OWN_PHONE, chat=(self.owner, "s.whatsapp.net"), from_me=True
            )
        )

    def redeliver_last(self) -> None:
        self.client.deliver(self._last)

    def drop_connection(self) -> None:
        self.client.disconnected()

    def delivered(self) -> list[Delivered]:
        return [Delivered(chat=jid, text=text) for jid, text in self.client.sent]

    def files_delivered(self) -> list[DeliveredFile]:
        return [
            DeliveredFile(
                chat=f["jid"],
                name=f["name"],
                data=f["data"],
                inline=f["image"],
                caption=f["caption"],
                voice=f.get("ptt", False),
            )
            for f in self.client.sent_files
        ]

    def typing_shown(self) -> bool:
        return (self.dm_chat, True) in self.client.presence

    def close(self) -> None:
        pass
