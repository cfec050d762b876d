"""The Mattermost adapter's harness: the real adapter against the fake Mattermost."""

from __future__ import annotations

from rousseau.transports.base import Transport
from rousseau.transports.mattermost import MAX_LENGTH, MattermostTransport
from tests.fakes.mattermost import (
    BOT_ID,
    DM_CHANNEL,
    OWNER_ID,
    STRANGER_DM,
    STRANGER_ID,
    TOKEN,
    TOWN_SQUARE,
    FakeMattermost,
)
from tests.transports.conformance import Delivered, DeliveredFile, File

IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


class MattermostHarness:
    name = "mattermost"
    owner = OWNER_ID
    stranger = STRANGER_ID
    dm_chat = DM_CHANNEL
    group_chat = TOWN_SQUARE
    measure = staticmethod(len)
    limit = MAX_LENGTH
    no_undeclared = "Mattermost states every file's size in the post's metadata"

    def __init__(self) -> None:
        self.fake = FakeMattermost().start()

    def transport(self) -> Transport:
        return MattermostTransport(self.fake.url, TOKEN)

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:
            self.fake.say(STRANGER_ID, STRANGER_DM, text)
        else:
            self.fake.say(OWNER_ID, DM_CHANNEL, text)

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        who, channel = (
            (STRANGER_ID, STRANGER_DM) if sender == self.stranger else (OWNER_ID, DM_CHANNEL)
        )
        upload = [(file.name, file.data, file.media_type)]
        self.fake.say(who, channel, text, files=upload, voice=file.voice)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        assert declared is not None, self.no_undeclared
        upload = [(file.name, file.data, file.media_type)]
        self.fake.say(OWNER_ID, DM_CHANNEL, text, files=upload, declared=declared)

    def served_whole(self) -> bool | None:
        return self.fake.unmeasured.last_whole()

    def group(self, text: str, *, mentioned: bool) -> None:
        if mentioned:
            self.fake.say(OWNER_ID, TOWN_SQUARE, f"@rousseau {text}", mentions=[BOT_ID])
        else:
            self.fake.say(OWNER_ID, TOWN_SQUARE, text)

    def mention_after(self, before: str, text: str) -> None:
        self.fake.say(OWNER_ID, TOWN_SQUARE, f"{before}@rousseau {text}", mentions=[BOT_ID])

    def own_message(self, text: str) -> None:
        self.fake.say(BOT_ID, DM_CHANNEL, text)

    def redeliver_last(self) -> None:
        self.fake.redeliver()

    def drop_connection(self) -> None:
        self.fake.drop()

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=p.channel_id, text=p.message, thread=p.root_id or None)
            for p in self.fake.bot_posts()
            if not p.file_ids
        ]

    def shown(self) -> list[str]:
        """What the direct chat shows of the bot's posts now (edits applied)."""
        return [p.shown for p in self.fake.bot_posts() if p.channel_id == DM_CHANNEL]

    def update_times(self) -> list[float]:
        posts = [p for p in self.fake.bot_posts() if p.channel_id == DM_CHANNEL]
        return sorted([p.at for p in posts] + [when for p in posts for when, _ in p.edits])

    def files_delivered(self) -> list[DeliveredFile]:
        return [
            DeliveredFile(
                chat=p.channel_id,
                name=self.fake.files[i].name,
                data=self.fake.files[i].data,
                inline=self.fake.files[i].name.lower().endswith(IMAGES),  # shown as a preview
                caption=p.shown,
            )
            for p in self.fake.bot_posts()
            for i in p.file_ids
        ]

    def typing_shown(self) -> bool:
        return any(channel == DM_CHANNEL for channel, _ in self.fake.typing)

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions: (the post reacted to, the emoji's name)."""
        return [(post, emoji) for user, post, emoji in self.fake.reactions if user == BOT_ID]

    def close(self) -> None:
        self.fake.stop()
