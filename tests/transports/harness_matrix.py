"""The Matrix adapter's harness: the real adapter against the real Synapse of the test session."""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from typing import Any, ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.matrix import MAX_LENGTH, MatrixTransport
from tests.fakes.files import Declared, stated
from tests.matrix.synapse import Synapse
from tests.transports.conformance import Delivered, DeliveredFile, File

FILE_TYPES = frozenset({"m.image", "m.file", "m.audio", "m.video"})


class MatrixHarness:
    name = "matrix"
    cannot: ClassVar[dict[str, str]] = {
        "redeliver_last": "a homeserver never sends one event twice; restart replay is in"
        " tests/matrix",
        "drop_connection": "a shared homeserver cannot cut one client's sync",
    }
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 8_000_000  # under Synapse's upload limit; its answers always carry a length

    def __init__(self, synapse: Synapse) -> None:
        self.synapse = synapse
        tag = secrets.token_hex(3)
        self.alice = synapse.register(f"owner{tag}")
        self.bob = synapse.register(f"friend{tag}")
        self.eve = synapse.register(f"stranger{tag}")
        self.bot_password = "bot-password-123"
        self.bot = synapse.register(f"bot{tag}", self.bot_password)
        self.owner = self.alice["user_id"]
        self.stranger = self.eve["user_id"]
        self.dm_chat = self._room(self.alice, [self.bot["user_id"]], direct=True)
        self.group_chat = self._room(self.alice, [self.bot["user_id"], self.bob["user_id"]])
        self._join(self.bob, self.group_chat)
        self._stranger_room = self._room(self.eve, [self.bot["user_id"]], direct=True)

    def transport(self) -> Transport:
        owner = self.owner
        return MatrixTransport(
            self.synapse.url,
            self.bot["user_id"],
            password=self.bot_password,
            may_invite=lambda sender: sender == owner,
        )

    def _room(self, who: dict[str, Any], invite: list[str], direct: bool = False) -> str:
        body = {
            "invite": invite,
            "preset": "trusted_private_chat" if direct else "private_chat",
            "is_direct": direct,
        }
        room = self.synapse.call(
            "POST", "/_matrix/client/v3/createRoom", body, token=who["access_token"]
        )
        return str(room["room_id"])

    def _join(self, who: dict[str, Any], room: str) -> None:
        self.synapse.call(
            "POST",
            f"/_matrix/client/v3/join/{urllib.parse.quote(room)}",
            {},
            token=who["access_token"],
        )

    def _say(
        self, who: dict[str, Any], room: str, body: str, mention: bool = False, before: str = ""
    ) -> None:
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if mention:
            content["body"] = f"{before}{self.bot['user_id']}: {body}"
            content["m.mentions"] = {"user_ids": [self.bot["user_id"]]}
        self._send(who, room, content)

    def _send(self, who: dict[str, Any], room: str, content: dict[str, Any]) -> None:
        if who is not self.eve:
            self._wait_bot_joined(room)
        path = (
            f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/send/m.room.message/"
            f"{secrets.token_hex(8)}"
        )
        self.synapse.call("PUT", path, content, token=who["access_token"])

    def dm_file(
        self, text: str, file: File, *, sender: str | None = None, declared: Declared = ...
    ) -> None:
        """Uploaded to the media repository, then sent as Element sends it: m.image, m.audio
        (a voice message marked as MSC3245 says) or m.file, a caption in `body` beside
        `filename`; `info.size` the `declared` size (left out for None)."""
        who, room = (
            (self.eve, self._stranger_room)
            if sender == self.stranger
            else (
                self.alice,
                self.dm_chat,
            )
        )
        path = f"/_matrix/media/v3/upload?filename={urllib.parse.quote(file.name)}"
        raw = self.synapse.raw("POST", path, file.data, who["access_token"], file.media_type)
        info: dict[str, Any] = {"mimetype": file.media_type}
        if (size := stated(file.data, declared)) is not None:
            info["size"] = size
        content: dict[str, Any] = {
            "msgtype": "m.file",
            "body": text or file.name,
            "filename": file.name,
            "url": json.loads(raw)["content_uri"],
            "info": info,
        }
        if file.media_type.startswith("image/"):
            content["msgtype"] = "m.image"
        elif file.media_type.startswith("audio/"):
            content["msgtype"] = "m.audio"
        if file.voice:
            info["duration"] = file.seconds * 1000
            content["org.matrix.msc3245.voice"] = {}
        self._send(who, room, content)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        self.dm_file(text, file, declared=declared)

    def served_whole(self) -> bool | None:
        return None  # a real homeserver: how much of the body it sent is not seen

    def _wait_bot_joined(self, room: str) -> None:
        path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/joined_members"
        deadline = time.monotonic() + 20
        while (
            self.bot["user_id"]
            not in self.synapse.call("GET", path, token=self.alice["access_token"])["joined"]
        ):
            if time.monotonic() > deadline:
                raise AssertionError("the bot never joined")
            time.sleep(0.1)

    def reactions(self) -> list[tuple[str, str]]:
        """The bot's reactions in the direct chat: (the event reacted to, its key)."""
        path = (
            f"/_matrix/client/v3/rooms/{urllib.parse.quote(self.dm_chat)}/messages?dir=f&limit=200"
        )
        chunk = self.synapse.call("GET", path, token=self.alice["access_token"])["chunk"]
        return [
            (e["content"]["m.relates_to"]["event_id"], e["content"]["m.relates_to"]["key"])
            for e in chunk
            if e["type"] == "m.reaction" and e["sender"] == self.bot["user_id"]
        ]

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:
            self._say(self.eve, self._stranger_room, text)
        else:
            self._say(self.alice, self.dm_chat, text)

    def group(self, text: str, *, mentioned: bool) -> None:
        self._say(self.alice, self.group_chat, text, mention=mentioned)

    def mention_after(self, before: str, text: str) -> None:
        self._say(self.alice, self.group_chat, text, mention=True, before=before)

    def own_message(self, text: str) -> None:
        self._wait_bot_joined(self.dm_chat)
        self._say(self.bot, self.dm_chat, text)

    def redeliver_last(self) -> None:
        raise NotImplementedError(self.cannot["redeliver_last"])

    def drop_connection(self) -> None:
        raise NotImplementedError(self.cannot["drop_connection"])

    def _dm_events(self) -> list[dict[str, Any]]:
        path = (
            f"/_matrix/client/v3/rooms/{urllib.parse.quote(self.dm_chat)}/messages?dir=f&limit=200"
        )
        chunk = self.synapse.call("GET", path, token=self.alice["access_token"])["chunk"]
        return [
            e for e in chunk if e["type"] == "m.room.message" and e["sender"] == self.bot["user_id"]
        ]

    def shown(self) -> list[str]:
        """What a client shows of the bot's messages in the direct chat: each message with
        its latest edit (`m.replace`) applied."""
        events = self._dm_events()
        shown = {
            e["event_id"]: e["content"]["body"]
            for e in events
            if (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
        }
        for e in events:
            relates = e["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace" and relates["event_id"] in shown:
                shown[relates["event_id"]] = e["content"]["m.new_content"]["body"]
        return list(shown.values())

    def update_times(self) -> list[float]:
        """When the bot's messages in the direct chat were sent or edited (server time)."""
        return sorted(e["origin_server_ts"] / 1000 for e in self._dm_events())

    def _bot_events(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for room in (self.dm_chat, self.group_chat):
            path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/messages?dir=f&limit=200"
            chunk = self.synapse.call("GET", path, token=self.alice["access_token"])["chunk"]
            out += [
                (room, e["content"])
                for e in chunk
                if e["type"] == "m.room.message" and e["sender"] == self.bot["user_id"]
            ]
        return out

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=room, text=content["body"])
            for room, content in self._bot_events()
            if content.get("msgtype") not in FILE_TYPES
            and not content["body"].startswith("echo: something I said")
        ]

    def files_delivered(self) -> list[DeliveredFile]:
        """Each file the bot sent, downloaded as a member would (authenticated media)."""
        out = []
        for room, content in self._bot_events():
            if content.get("msgtype") not in FILE_TYPES:
                continue
            server, media = content["url"].removeprefix("mxc://").split("/", 1)
            path = f"/_matrix/client/v1/media/download/{server}/{media}"
            name = content.get("filename") or content["body"]
            out.append(
                DeliveredFile(
                    chat=room,
                    name=name,
                    data=self.synapse.raw("GET", path, None, self.alice["access_token"]),
                    inline=content["msgtype"] == "m.image",
                    caption=content["body"] if content["body"] != name else "",
                    voice="org.matrix.msc3245.voice" in content,
                )
            )
        return out

    def close(self) -> None:
        pass
