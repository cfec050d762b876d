"""The Slack adapter's harness for the conformance suite."""

from __future__ import annotations

from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.slack import SOFT_LIMIT, SlackTransport
from tests.fakes.slack import BOT_USER, FakeSlack
from tests.transports.conformance import Delivered, DeliveredFile, File

IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


class SlackHarness:
    name = "slack"
    owner = "U0OWNER"
    stranger = "U0EVE"
    dm_chat = "D0DM"
    group_chat = "C0GENERAL"
    measure = staticmethod(len)
    limit = SOFT_LIMIT
    largest = 64_000_000

    def __init__(self) -> None:
        self.fake = FakeSlack().start()
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        return SlackTransport(
            self.fake.app_token, self.fake.bot_token, base_url=self.fake.url + "/api/"
        )

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions: (the message's id as the transport names it, name)."""
        return [(f"{channel}:{ts}", name) for channel, ts, name in self.fake.reactions]

    def dm(self, text: str, *, sender: str | None = None) -> None:
        user = sender or self.owner
        channel = self.dm_chat if user == self.owner else "D0OTHER"
        self._last = self.fake.message(text, user=user, channel=channel)

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        user = sender or self.owner
        channel = self.dm_chat if user == self.owner else "D0OTHER"
        files = [(file.name, file.data, file.media_type)]
        self._last = self.fake.message(text, user=user, channel=channel, files=files)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        files = [(file.name, file.data, file.media_type)]
        self._last = self.fake.message(
            text, user=self.owner, channel=self.dm_chat, files=files, declared=declared
        )

    def served_whole(self) -> bool | None:
        return self.fake.unmeasured.last_whole()

    def group(self, text: str, *, mentioned: bool) -> None:
        if mentioned:
            self._last = self.fake.mention(text, user=self.owner, channel=self.group_chat)
        else:
            self._last = self.fake.message(text, user=self.owner, channel=self.group_chat)

    def mention_after(self, before: str, text: str) -> None:
        # Slack marks the mention up as <@U...> where it was typed and adds an app_mention.
        event = self.fake.message(
            f"{before}<@{BOT_USER}> {text}", user=self.owner, channel=self.group_chat
        )
        mention = dict(event, type="app_mention")
        mention.pop("channel_type")
        self.fake.send_event(mention)
        self._last = event

    def own_message(self, text: str) -> None:
        self.fake.message(text, channel=self.dm_chat, bot=True)

    def redeliver_last(self) -> None:
        assert self._last is not None
        self.fake.send_event(self._last, retry=1)

    def drop_connection(self) -> None:
        self.fake.drop()

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=p.channel, text=p.text, thread=p.thread_ts) for p in self.fake.posted
        ]

    def shown(self) -> list[str]:
        """What the direct chat shows of the bot's messages now (edits applied)."""
        return [p.shown for p in self.fake.posted if p.channel == self.dm_chat]

    def update_times(self) -> list[float]:
        """When the bot's messages in the direct chat were posted or updated."""
        posted = [p for p in self.fake.posted if p.channel == self.dm_chat]
        return sorted([p.at for p in posted] + [t for p in posted for t in p.updated_at])

    def files_delivered(self) -> list[DeliveredFile]:
        return [
            DeliveredFile(
                chat=u.channel,
                name=u.name,
                data=u.data,
                inline=u.name.lower().endswith(IMAGES),  # Slack previews images in the channel
                caption=u.comment,
            )
            for u in self.fake.uploaded
        ]

    def close(self) -> None:
        self.fake.stop()
