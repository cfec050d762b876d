"""The iMessage adapter's harness: httpx against a fake BlueBubbles server."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.imessage import MAX_LENGTH, IMessageTransport
from tests.fakes.bluebubbles import PASSWORD, FakeBlueBubbles
from tests.transports.conformance import Delivered, DeliveredFile, File


class IMessageHarness:
    name = "imessage"
    owner = "+15551230001"
    stranger = "+15556660666"
    dm_chat = f"iMessage;-;{owner}"
    group_chat = "iMessage;+;chat424242"
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 64_000_000

    def __init__(self, **options: Any) -> None:
        self.server = FakeBlueBubbles().start()
        self.options = options
        self.last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        options = {"poll_interval": 0.1, "private_api": True, **self.options}
        return IMessageTransport(self.server.url, PASSWORD, **options)

    def dm(self, text: str, *, sender: str | None = None) -> None:
        sender = sender or self.owner
        self.last = self.server.receive(text, sender=sender, chat=f"iMessage;-;{sender}")

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        sender = sender or self.owner
        self.last = self.server.receive(
            text,
            sender=sender,
            chat=f"iMessage;-;{sender}",
            file=(file.name, file.media_type, file.data),
            audio_message=file.voice,
        )

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        self.last = self.server.receive(
            text,
            sender=self.owner,
            chat=self.dm_chat,
            file=(file.name, file.media_type, file.data),
            declared=declared,
        )

    def served_whole(self) -> bool | None:
        return self.server.unmeasured.last_whole()

    def group(self, text: str, *, mentioned: bool) -> None:
        text = f"@rousseau {text}" if mentioned else text
        self.last = self.server.receive(text, sender=self.owner, chat=self.group_chat)

    def mention_after(self, before: str, text: str) -> None:
        text = f"{before}@rousseau {text}"
        self.last = self.server.receive(text, sender=self.owner, chat=self.group_chat)

    def own_message(self, text: str) -> None:
        self.server.receive(text, sender="", chat=self.dm_chat, from_me=True)

    def redeliver_last(self) -> None:
        assert self.last is not None
        self.server.add(dict(self.last))

    def drop_connection(self) -> None:
        self.server.fail_queries = 1

    def _captions(self) -> dict[int, dict[str, Any]]:
        """Texts sent right after a file to the same chat, by the file's place: BlueBubbles
        sends a file without text, so its caption follows it."""
        with self.server.lock:
            files = {f["_seq"]: f for f in self.server.sent_files}
            texts = list(self.server.sent)
        return {
            t["_seq"] - 1: t
            for t in texts
            if t["_seq"] - 1 in files and files[t["_seq"] - 1]["chatGuid"] == t["chatGuid"]
        }

    def delivered(self) -> list[Delivered]:
        captions = {id(t) for t in self._captions().values()}
        with self.server.lock:
            sent = list(self.server.sent)
        return [
            Delivered(chat=s["chatGuid"], text=s["message"]) for s in sent if id(s) not in captions
        ]

    def files_delivered(self) -> list[DeliveredFile]:
        captions = self._captions()
        with self.server.lock:
            files = list(self.server.sent_files)
        return [
            DeliveredFile(
                chat=f["chatGuid"],
                name=f["name"],
                data=f["data"],
                inline=f["mimeType"].startswith("image/"),  # as Messages shows it
                caption=captions[f["_seq"]]["message"] if f["_seq"] in captions else "",
            )
            for f in files
        ]

    def typing_shown(self) -> bool:
        return bool(self.server.typing)

    def close(self) -> None:
        self.server.stop()
