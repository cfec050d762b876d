"""The example plugin's transport (examples/plugin), loaded through its entry point as the
daemon loads it, against a fake linechat server."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from tests.fakes.linechat import BOT, TOKEN, FakeLinechat
from tests.helpers import unavailable
from tests.transports.conformance import Delivered


def example_plugin(name: str) -> Any:
    """The example package's plugin `name`, loaded as the daemon loads it."""
    from rousseau.plugins import installed, load

    item = installed().get(name)
    if item is None:
        unavailable("the example plugin is not installed: pip install -e examples/plugin")
    assert item is not None
    return load(item)


class LinechatHarness:
    name = "linechat"
    owner = "alice"
    stranger = "mallory"
    dm_chat = "dm-alice"
    group_chat = "room-1"
    measure = staticmethod(len)
    limit = 2000

    def __init__(self) -> None:
        self.plugin = example_plugin("linechat")
        self.server = FakeLinechat().start()
        self.last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        section = self.plugin.config.model_validate(
            {"address": self.server.address, "token": TOKEN, "max_length": self.limit}
        )
        return self.plugin.build(section)  # type: ignore[no-any-return]

    def dm(self, text: str, *, sender: str | None = None) -> None:
        sender = sender or self.owner
        self.last = self.server.deliver({"chat": f"dm-{sender}", "sender": sender, "text": text})

    def group(self, text: str, *, mentioned: bool) -> None:
        self.last = self.server.deliver(
            {
                "chat": self.group_chat,
                "sender": self.owner,
                "text": text,
                "group": True,
                "mentioned": mentioned,
            }
        )

    def own_message(self, text: str) -> None:
        self.server.deliver({"chat": self.dm_chat, "sender": BOT, "text": text})

    def redeliver_last(self) -> None:
        assert self.last is not None
        self.server.deliver(dict(self.last))

    def drop_connection(self) -> None:
        self.server.drop()

    def delivered(self) -> list[Delivered]:
        with self.server.lock:
            return [Delivered(chat=s["chat"], text=s["text"]) for s in self.server.sent]

    def typing_shown(self) -> bool:
        with self.server.lock:
            return bool(self.server.typing)

    def close(self) -> None:
        self.server.stop()
