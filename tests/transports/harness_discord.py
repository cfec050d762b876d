"""The Discord adapter's harness for the conformance suite."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.discord import MAX_LENGTH, DiscordTransport
from tests.fakes.discord import (
    BOT_ID,
    GENERAL_ID,
    GUILD_ID,
    OWNER_ID,
    VOICE_MESSAGE,
    FakeDiscord,
)
from tests.transports.conformance import Delivered, DeliveredFile, File

IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


class DiscordHarness:
    name = "discord"
    owner = OWNER_ID
    stranger = "700000000000000666"
    group_chat = GENERAL_ID
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 64_000_000
    no_undeclared = "Discord states every attachment's size"

    def __init__(self) -> None:
        self.fake = FakeDiscord().start()
        self._last: dict[str, Any] | None = None
        self._ids = itertools.count(110000000000000000)

    @property
    def dm_chat(self) -> str:
        return self.fake._dm_channels.setdefault(
            OWNER_ID, str(600000000000000000 + int(OWNER_ID[-6:]))
        )

    def transport(self) -> Transport:
        return DiscordTransport(
            self.fake.token, api_base=self.fake.api_base, gateway_url=self.fake.gateway_url
        )

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions: (the message's id as the transport names it, emoji)."""
        return [(message, emoji) for _, message, emoji in self.fake.reactions]

    def dm(self, text: str, *, sender: str | None = None) -> None:
        self._last = self.fake.dm(text, user_id=sender or self.owner)

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        self._last = self.fake.dm(
            text,
            user_id=sender or self.owner,
            files=[(file.name, file.data, file.media_type)],
            voice_seconds=file.seconds if file.voice else 0,
        )

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        assert declared is not None, self.no_undeclared
        files = [(file.name, file.data, file.media_type, declared)]
        self._last = self.fake.dm(text, user_id=self.owner, files=files)

    def served_whole(self) -> bool | None:
        return self.fake.unmeasured.last_whole()

    def group(self, text: str, *, mentioned: bool) -> None:
        self._last = self.fake.message(text, mention_bot=mentioned)

    def mention_after(self, before: str, text: str) -> None:
        # The fake names the bot first; Discord keeps <@id> where it was typed and lists the
        # user in `mentions`, so this MESSAGE_CREATE is written out here.
        def user(user_id: str, name: str, bot: bool) -> dict[str, Any]:
            return {
                "id": user_id,
                "username": name,
                "discriminator": "0",
                "global_name": name,
                "avatar": None,
                "bot": bot,
            }

        self._last = {
            "id": str(next(self._ids)),
            "channel_id": self.group_chat,
            "guild_id": GUILD_ID,
            "author": user(self.owner, "owner", False),
            "member": {
                "roles": [],
                "joined_at": "2024-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
            },
            "content": f"{before}<@{BOT_ID}> {text}",
            "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [user(BOT_ID, "rousseau", True)],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        self.fake.dispatch("MESSAGE_CREATE", self._last)

    def own_message(self, text: str) -> None:
        self.fake.dm(text, user_id=BOT_ID, bot=True)

    def redeliver_last(self) -> None:
        assert self._last is not None
        self.fake.redeliver(self._last)

    def drop_connection(self) -> None:
        self.fake.drop()

    def delivered(self) -> list[Delivered]:
        return [Delivered(chat=m.channel_id, text=m.content) for m in self.fake.sent if not m.files]

    def shown(self) -> list[str]:
        """What the direct chat shows of the bot's messages now (edits applied)."""
        return [m.shown for m in self.fake.sent if m.channel_id == self.dm_chat and not m.files]

    def update_times(self) -> list[float]:
        """When the bot's messages in the direct chat were sent or edited."""
        sent = [m for m in self.fake.sent if m.channel_id == self.dm_chat]
        return sorted([m.at for m in sent] + [t for m in sent for t in m.edited_at])

    def files_delivered(self) -> list[DeliveredFile]:
        return [
            DeliveredFile(
                chat=m.channel_id,
                name=name,
                data=data,
                inline=name.lower().endswith(IMAGES),  # Discord embeds images by their name
                caption=m.content,
                voice=bool(m.flags & VOICE_MESSAGE),
            )
            for m in self.fake.sent
            for name, data, _ in m.files
        ]

    def typing_shown(self) -> bool:
        return self.dm_chat in self.fake.typing

    def close(self) -> None:
        self.fake.stop()
