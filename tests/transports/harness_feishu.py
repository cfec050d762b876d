"""The Feishu adapter's harness: the real adapter (lark-oapi) against the fake Feishu, which
pushes events down the SDK's long connection."""

from __future__ import annotations

from typing import ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.feishu import MAX_LENGTH, FeishuTransport
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    DM_CHAT,
    GROUP_CHAT,
    OWNER_ID,
    STRANGER_DM,
    STRANGER_ID,
    FakeFeishu,
)
from tests.transports.conformance import Delivered, DeliveredFile, File

KINDS = {"image": "image", "audio": "audio"}


class FeishuHarness:
    name = "feishu"
    owner = OWNER_ID
    stranger = STRANGER_ID
    dm_chat = DM_CHAT
    group_chat = GROUP_CHAT
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 30 * 1024 * 1024
    no_typing = "Feishu has no typing indicator a bot can set"
    cannot: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        self.fake = FakeFeishu().start()

    def transport(self) -> Transport:
        return FeishuTransport(APP_ID, APP_SECRET, base_url=self.fake.url)

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:
            self.fake.say(STRANGER_ID, STRANGER_DM, text)
        else:
            self.fake.say(OWNER_ID, DM_CHAT, text)

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        """An image with words is rich text (a post), as the app sends one; a file and the
        words typed with it are two messages there, and only the file is sent here (each
        would be answered on its own)."""
        who, chat = (STRANGER_ID, STRANGER_DM) if sender == self.stranger else (OWNER_ID, DM_CHAT)
        image = file.media_type.startswith("image/")
        kind = "audio" if file.voice else "image" if image else "file"
        self.fake.send_file(
            who, chat, file.name, file.data, file.media_type, kind=kind, words=text if image else ""
        )

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        """Feishu states no size in the message: whatever is declared, the only word on it
        is the download's, which here comes without a length."""
        self.fake.send_file(
            OWNER_ID, DM_CHAT, file.name, file.data, file.media_type, declared=len(file.data)
        )

    def served_whole(self) -> bool | None:
        return self.fake.unmeasured.last_whole()

    def group(self, text: str, *, mentioned: bool) -> None:
        self.fake.say(OWNER_ID, GROUP_CHAT, text, mention=mentioned)

    def mention_after(self, before: str, text: str) -> None:
        self.fake.say(OWNER_ID, GROUP_CHAT, f"{before}@_user_1 {text}", mention=True)

    def own_message(self, text: str) -> None:
        """Feishu does not push a bot's own messages to it; another app's come as sender_type
        app, which is what this sends."""
        self.fake.say(OWNER_ID, DM_CHAT, text, sender_type="app")

    def redeliver_last(self) -> None:
        self.fake.redeliver()

    def drop_connection(self) -> None:
        self.fake.drop()

    def _captions(self) -> set[str]:
        """The messages that are a file's words: replies to a file the bot sent."""
        files = {s.message_id for s in self.fake.sent if s.msg_type in ("file", "audio")}
        return {s.message_id for s in self.fake.sent if s.reply_to in files}

    def delivered(self) -> list[Delivered]:
        captions = self._captions()
        return [
            Delivered(chat=s.chat_id, text=s.first, thread=s.reply_to)
            for s in self.fake.sent
            if s.msg_type in ("text", "interactive") and s.message_id not in captions
        ]

    def shown(self) -> list[str]:
        """What the direct chat shows of the bot's messages now (card updates applied)."""
        return [s.shown for s in self.fake.sent if s.chat_id == DM_CHAT]

    def update_times(self) -> list[float]:
        sent = [s for s in self.fake.sent if s.chat_id == DM_CHAT]
        return sorted([s.at for s in sent] + [when for s in sent for when, _ in s.updates])

    def files_delivered(self) -> list[DeliveredFile]:
        delivered = []
        for s in self.fake.sent:
            for key in s.keys:
                stored = self.fake.files[key]
                words = [c.shown for c in self.fake.sent if c.reply_to == s.message_id]
                delivered.append(
                    DeliveredFile(
                        chat=s.chat_id,
                        name=stored.name,
                        data=stored.data,
                        inline=s.msg_type in ("image", "post"),
                        caption=s.shown if s.msg_type == "post" else "".join(words),
                        voice=s.msg_type == "audio",
                    )
                )
        return delivered

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions: (the message reacted to, its emoji_type)."""
        return list(self.fake.reactions)

    def close(self) -> None:
        self.fake.stop()
