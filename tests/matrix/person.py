"""Someone on their own end-to-end encrypting Matrix client (matrix-nio, as Element would
be): logs in as a device of its own, syncs in the background, decrypts what it is sent."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import nio

from tests.matrix.synapse import Synapse

# A 2x2 red PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a73000000"
    "164944415478da63f8cfc0f09f8181e13f0303c37f000024d003fd6a9c1b3e0000000049454e44ae426082"
)


class Person:
    """Someone on their own E2E client, syncing in the background."""

    def __init__(self, synapse: Synapse, account: dict[str, Any], store: Path) -> None:
        store.mkdir(mode=0o700)
        config = nio.AsyncClientConfig(encryption_enabled=True, store_sync_tokens=True)
        self.client = nio.AsyncClient(
            synapse.url, account["user_id"], store_path=str(store), config=config
        )
        self.password = "secret-pass-123"
        self.texts: list[tuple[str, str, bool]] = []
        """(sender, body, decrypted) of each text message seen."""
        self.rooms_said: list[tuple[str, str, str, bool]] = []
        """(room, sender, body, decrypted) of each text message seen."""
        self.images: list[tuple[str, bytes]] = []
        self.client.add_event_callback(self._text, nio.RoomMessageText)
        self.client.add_event_callback(self._image, nio.RoomEncryptedImage)

    async def _text(self, room: Any, event: Any) -> None:
        self.texts.append((event.sender, event.body, event.decrypted))
        self.rooms_said.append((room.room_id, event.sender, event.body, event.decrypted))

    async def _image(self, room: Any, event: Any) -> None:
        downloaded = await self.client.download(mxc=event.url)
        plain = nio.crypto.attachments.decrypt_attachment(
            downloaded.body, event.key["k"], event.hashes["sha256"], event.iv
        )
        self.images.append((event.sender, plain))

    async def start(self, tg: Any) -> None:
        await self.login()
        tg.start_soon(self.client.sync_forever, 300)

    async def login(self) -> None:
        await self.client.login(self.password, device_name="phone")

    def sees_joined(self, room: str, user: str) -> bool:
        """Whether this client's own view of `room` has `user` in it (what it encrypts for)."""
        known = self.client.rooms.get(room)
        return known is not None and user in known.users

    def said_by(self, who: str) -> list[str]:
        return [body for sender, body, _ in self.texts if sender == who]

    async def encrypted_room(self, *invite: str, direct: bool = True) -> str:
        created = await self.client.room_create(
            invite=list(invite),
            is_direct=direct,
            initial_state=[
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ],
        )
        return str(created.room_id)

    async def say(self, room: str, text: str, **extra: Any) -> None:
        sent = await self.client.room_send(
            room,
            "m.room.message",
            {"msgtype": "m.text", "body": text, **extra},
            ignore_unverified_devices=True,
        )
        assert isinstance(sent, nio.RoomSendResponse), sent

    async def send_image(self, room: str) -> None:
        cipher, keys = nio.crypto.attachments.encrypt_attachment(PNG)
        uploaded, _ = await self.client.upload(
            io.BytesIO(cipher), content_type="application/octet-stream", filesize=len(cipher)
        )
        content = {
            "msgtype": "m.image",
            "body": "red.png",
            "info": {"mimetype": "image/png", "size": len(PNG)},
            "file": {"url": uploaded.content_uri, "mimetype": "image/png", **keys},
        }
        await self.client.room_send(room, "m.room.message", content, ignore_unverified_devices=True)
