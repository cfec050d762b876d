"""The Telegram adapter's harness for the conformance suite."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.split import utf16_len
from rousseau.transports.telegram import MAX_LENGTH, TelegramTransport
from tests.fakes.files import Declared
from tests.fakes.telegram import BOT_ID, FakeTelegram
from tests.transports.conformance import Delivered, DeliveredFile, File


class TelegramHarness:
    name = "telegram"
    owner = "42"
    stranger = "666"
    dm_chat = "42"
    group_chat = "-100"
    measure = staticmethod(utf16_len)
    limit = MAX_LENGTH
    largest = 64_000_000

    def __init__(self) -> None:
        self.fake = FakeTelegram().start()
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        return TelegramTransport(self.fake.token, base_url=self.fake.url, poll_timeout=1)

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions: (the message's id as the transport names it, emoji)."""
        return [(f"{chat}:{message}", emoji) for chat, message, emoji in self.fake.reactions]

    def dm(self, text: str, *, sender: str | None = None) -> None:
        user = int(sender or self.owner)
        self._last = self.fake.push(text, chat_id=user, user_id=user)

    def group(self, text: str, *, mentioned: bool) -> None:
        self._last = self.fake.push(
            text,
            chat_id=int(self.group_chat),
            user_id=int(self.owner),
            chat_type="supergroup",
            mention=mentioned,
        )

    def mention_after(self, before: str, text: str) -> None:
        self._last = self.fake.push(
            text,
            chat_id=int(self.group_chat),
            user_id=int(self.owner),
            chat_type="supergroup",
            mention=True,
            prefix=before,
        )

    def dm_file(
        self, text: str, file: File, *, sender: str | None = None, declared: Declared = ...
    ) -> None:
        kind = "document"
        if file.voice:
            kind = "voice"
        elif file.media_type.startswith("image/"):
            kind = "photo"
        user = int(sender or self.owner)
        attach = (kind, file.data, file.name, file.media_type)
        self._last = self.fake.push(
            text, chat_id=user, user_id=user, attach=attach, declared=declared
        )

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        self.dm_file(text, file, declared=declared)

    def served_whole(self) -> bool | None:
        return self.fake.unmeasured.last_whole()

    def own_message(self, text: str) -> None:
        self.fake.push(text, chat_id=int(self.dm_chat), user_id=BOT_ID, from_bot=True)

    def redeliver_last(self) -> None:
        assert self._last is not None
        self.fake.deliver(self._last)

    def drop_connection(self) -> None:
        self.fake.drop_polls = 1

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=str(s.chat_id), text=s.text)
            for s in self.fake.sent
            if "_kind" not in s.params
        ]

    def shown(self) -> list[str]:
        """What the direct chat shows of the bot's messages now (edits applied)."""
        return self.fake.visible(int(self.dm_chat))

    def update_times(self) -> list[float]:
        """When the bot's messages in the direct chat were sent or edited."""
        chat = int(self.dm_chat)
        return sorted(
            [s.at for s in self.fake.sent if s.chat_id == chat]
            + [e.at for e in self.fake.edits if e.chat_id == chat]
        )

    def files_delivered(self) -> list[DeliveredFile]:
        return [
            DeliveredFile(
                chat=str(s.chat_id),
                name=s.params["_filename"],
                data=s.params["_data"],
                inline=s.params["_kind"] == "photo",
                caption=s.text,
                voice=s.params["_kind"] == "voice",
            )
            for s in self.fake.sent
            if "_kind" in s.params
        ]

    def typing_shown(self) -> bool:
        return (int(self.dm_chat), "typing") in self.fake.actions

    def close(self) -> None:
        self.fake.stop()
