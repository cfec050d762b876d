"""The iMessage adapter's harness: httpx against a fake BlueBubbles server."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.imessage import MAX_LENGTH, IMessageTransport
from tests.fakes.bluebubbles import PASSWORD, FakeBlueBubbles
from tests.transports.conformance import Delivered


class IMessageHarness:
    name = "imessage"
    owner = "+15551230001"
    stranger = "+15556660666"
    dm_chat = f"iMessage;-;{owner}"
    group_chat = "iMessage;+;chat424242"
    measure = staticmethod(len)
    limit = MAX_LENGTH

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

    def delivered(self) -> list[Delivered]:
        with self.server.lock:
            return [Delivered(chat=s["chatGuid"], text=s["message"]) for s in self.server.sent]

    def typing_shown(self) -> bool:
        return bool(self.server.typing)

    def close(self) -> None:
        self.server.stop()
