"""The Matrix adapter's harness in end-to-end encrypted rooms: the real adapter with
`encryption` on against the real Synapse of the test session, the owner on an E2E client of
their own (matrix-nio) that counts only what it could decrypt: a reply sent in plain text
into an encrypted room is never delivered.

The people's clients run on the test's own event loop (`start` and `stop` are awaited by an
async fixture; the scenarios' threads reach the loop through anyio): matrix-nio binds its key
store's tables for the length of each call, process-wide, so two clients' calls in two
threads would read each other's databases."""

from __future__ import annotations

import asyncio
import secrets
import time
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

import anyio.from_thread

from rousseau.transports.base import Transport
from rousseau.transports.matrix import MAX_LENGTH, MatrixTransport
from tests.matrix.person import Person
from tests.matrix.synapse import Synapse
from tests.transports.conformance import Delivered


class EncryptedMatrixHarness:
    name = "matrix"
    cannot: ClassVar[dict[str, str]] = {
        "redeliver_last": "a homeserver never sends one event twice",
        "drop_connection": "a shared homeserver cannot cut one client's sync",
    }
    measure = staticmethod(len)
    limit = MAX_LENGTH

    def __init__(self, synapse: Synapse, folder: Path) -> None:
        self.synapse = synapse
        self.folder = folder
        tag = secrets.token_hex(3)
        owner = synapse.register(f"owner{tag}")
        stranger = synapse.register(f"stranger{tag}")
        self.bob = synapse.register(f"friend{tag}")
        self.bot_password = "bot-password-123"
        self.bot = synapse.register(f"bot{tag}", self.bot_password)
        self.bot_id = self.bot["user_id"]
        self.owner, self.stranger = owner["user_id"], stranger["user_id"]
        self.alice = Person(synapse, owner, folder / "alice-store")
        self.eve = Person(synapse, stranger, folder / "eve-store")
        self._syncs: list[asyncio.Task[Any]] = []
        self.dm_chat = self.group_chat = self._stranger_room = ""

    async def start(self) -> None:
        """The people logged in and syncing, their encrypted rooms made."""
        for person in (self.alice, self.eve):
            await person.login()
            self._syncs.append(asyncio.ensure_future(person.client.sync_forever(300)))
        self.dm_chat = await self.alice.encrypted_room(self.bot_id)
        self.group_chat = await self.alice.encrypted_room(
            self.bot_id, self.bob["user_id"], direct=False
        )
        await anyio.to_thread.run_sync(
            lambda: self.synapse.call(
                "POST",
                f"/_matrix/client/v3/join/{urllib.parse.quote(self.group_chat)}",
                {},
                token=self.bob["access_token"],
            )
        )
        self._stranger_room = await self.eve.encrypted_room(self.bot_id)

    async def stop(self) -> None:
        for sync in self._syncs:
            sync.cancel()
        await asyncio.gather(*self._syncs, return_exceptions=True)
        for person in (self.alice, self.eve):
            await person.client.close()

    def transport(self) -> Transport:
        owner = self.owner
        return MatrixTransport(
            self.synapse.url,
            self.bot_id,
            password=self.bot_password,
            may_invite=lambda sender: sender == owner,
            encryption=True,
            store=self.folder / "bot-keys",
        )

    def _bot_seen_in(self, room: str) -> None:
        """Until the owner's client has the bot among the room's members: what it encrypts
        after that, it encrypts for the bot's device too."""
        deadline = time.monotonic() + 30
        while not self.alice.sees_joined(room, self.bot_id):
            if time.monotonic() > deadline:
                raise AssertionError("the bot never joined")
            time.sleep(0.05)

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:  # the bot never joins a stranger's room
            anyio.from_thread.run(self.eve.say, self._stranger_room, text)
            return
        self._bot_seen_in(self.dm_chat)
        anyio.from_thread.run(self.alice.say, self.dm_chat, text)

    def group(self, text: str, *, mentioned: bool) -> None:
        self._bot_seen_in(self.group_chat)
        if mentioned:
            self._mention("", text)
        else:
            anyio.from_thread.run(self.alice.say, self.group_chat, text)

    def mention_after(self, before: str, text: str) -> None:
        self._bot_seen_in(self.group_chat)
        self._mention(before, text)

    def _mention(self, before: str, text: str) -> None:
        mentions = {"user_ids": [self.bot_id]}
        body = f"{before}{self.bot_id}: {text}"
        anyio.from_thread.run(
            lambda: self.alice.say(self.group_chat, body, **{"m.mentions": mentions})
        )

    def own_message(self, text: str) -> None:
        """The bot's account, from another of its devices, writes in the direct chat."""
        self._bot_seen_in(self.dm_chat)
        path = (
            f"/_matrix/client/v3/rooms/{urllib.parse.quote(self.dm_chat)}/send/m.room.message/"
            f"{secrets.token_hex(8)}"
        )
        content = {"msgtype": "m.text", "body": text}
        self.synapse.call("PUT", path, content, token=self.bot["access_token"])

    def redeliver_last(self) -> None:
        raise NotImplementedError(self.cannot["redeliver_last"])

    def drop_connection(self) -> None:
        raise NotImplementedError(self.cannot["drop_connection"])

    def delivered(self) -> list[Delivered]:
        """Each message of the bot's that the owner's client decrypted."""
        return [
            Delivered(chat=room, text=body)
            for room, sender, body, decrypted in list(self.alice.rooms_said)
            if sender == self.bot_id and decrypted
        ]

    def close(self) -> None:
        pass  # `stop` ends the people's clients, on the loop they ran on
