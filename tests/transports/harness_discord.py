"""The Discord adapter's harness for the conformance suite."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.discord import MAX_LENGTH, DiscordTransport
from tests.fakes.discord import BOT_ID, GENERAL_ID, OWNER_ID, FakeDiscord
from tests.transports.conformance import Delivered


class DiscordHarness:
    name = "discord"
    owner = OWNER_ID
    stranger = "700000000000000666"
    group_chat = GENERAL_ID
    measure = staticmethod(len)
    limit = MAX_LENGTH

    def __init__(self) -> None:
        self.fake = FakeDiscord().start()
        self._last: dict[str, Any] | None = None

    @property
    def dm_chat(self) -> str:
        return self.fake._dm_channels.setdefault(
            OWNER_ID, str(600000000000000000 + int(OWNER_ID[-6:]))
        )

    def transport(self) -> Transport:
        return DiscordTransport(
            self.fake.token, api_base=self.fake.api_base, gateway_url=self.fake.gateway_url
        )

    def dm(self, text: str, *, sender: str | None = None) -> None:
        self._last = self.fake.dm(text, user_id=sender or self.owner)

    def group(self, text: str, *, mentioned: bool) -> None:
        self._last = self.fake.message(text, mention_bot=mentioned)

    def own_message(self, text: str) -> None:
        self.fake.dm(text, user_id=BOT_ID, bot=True)

    def redeliver_last(self) -> None:
        assert self._last is not None
        self.fake.redeliver(self._last)

    def drop_connection(self) -> None:
        self.fake.drop()

    def delivered(self) -> list[Delivered]:
        return [Delivered(chat=m.channel_id, text=m.content) for m in self.fake.sent]

    def typing_shown(self) -> bool:
        return self.dm_chat in self.fake.typing

    def close(self) -> None:
        self.fake.stop()
