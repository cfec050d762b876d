"""Matrix through matrix-nio: token or password login kept across restarts, sync resumed from
its persisted `since` token (a restart never replays history), invites from allowed users
joined, DMs answered and rooms when mentioned, replies with Markdown rendered to HTML.

With `encryption`, end-to-end encrypted rooms are read and answered encrypted (matrix-nio's
E2E on vodozemac): the device's keys and Olm/Megolm sessions live in a key store folder of
this machine (0700), and so does the login, so each daemon holding the transport is a
device of its own. The room's devices are trusted on first use; an owner verifies or blocks
one with `rousseau matrix verify|block`, applied at the next sync. Without it, an encrypted
room is never answered in plain text, and is named once in a warning.
"""

from __future__ import annotations

import functools
import io
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.private import private_folder, write_private
from rousseau.transports.base import Throttled, describe, file_bytes, take_by_chat, take_files
from rousseau.transports.matrix_sync import SyncChecked
from rousseau.transports.unreadable import Unreadable, checked, number, refuse, text

try:
    import aiohttp
    import markdown
    import nio
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the matrix transport", "matrix") from exc

log = structlog.get_logger("rousseau.matrix")

MAX_LENGTH = 16_000  # Matrix events may be 64 KiB; replies stay readable well below that
SYNC_TIMEOUT_MS = 30_000
MAX_TIMEOUTS = 5
ROOMS_CHECKED = 100
"""Joined rooms `check` looks at for encryption (one request each: doctor stays quick)."""
"""Connection failures nio retries (backing off) before they reach the supervisor."""
_FAILURES = (nio.exceptions.ProtocolError, aiohttp.ClientError, OSError, TimeoutError)
_TOKEN_REFUSED = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"})
_LOGIN_REFUSED = frozenset({"M_FORBIDDEN", "M_USER_DEACTIVATED", "M_INVALID_USERNAME"})
_GONE = frozenset({"M_NOT_FOUND", "M_TOO_LARGE", "M_NOT_YET_UPLOADED"})
"""Download refusals that fetching again will not mend: the file is noted as unavailable."""
MAX_FILE_BYTES = 50_000_000
"""What send_file may attach: Synapse's default upload limit (`max_upload_size`)."""
VOICE = "org.matrix.msc3245.voice"
"""The key that marks an m.audio event as a voice message (Element's, MSC3245)."""
_MSGTYPES = {"image": "m.image", "audio": "m.audio", "video": "m.video"}
TRUST_KEY = "trust"
"""The transport state's key for the owner's device decisions: {"USER DEVICE": verdict}."""
DEVICES_KEY = "devices"
"""The transport state's key where the devices the bot knows are published (for the CLI)."""
VERDICTS = ("verify", "block", "unverify", "unblock")


def _replacing(event_id: str, content: dict[str, Any]) -> dict[str, Any]:
    """An edit of `event_id` to `content` (`m.replace`); clients without edits show the
    fallback body, starred as Element stars it."""
    return {
        **content,
        "body": f"* {content['body']}",
        "m.new_content": content,
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }


class _Unavailable(Exception):
    """The homeserver will not give a file (gone, or over its limit)."""


class MatrixTransport:
    name = "matrix"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(
        self,
        homeserver_url: str,
        user_id: str,
        *,
        access_token: str | None = None,
        password: str | None = None,
        device_id: str | None = None,
        msgtype: str = "m.text",
        may_invite: Callable[[str], bool] = lambda sender: False,
        encryption: bool = False,
        store: Path | None = None,
    ) -> None:
        if not access_token and not password:
            raise ValueError("matrix needs access_token or password")
        self.homeserver_url = homeserver_url.rstrip("/")
        self.user_id = user_id
        self.access_token = access_token
        self.password = password
        self.device_id = device_id
        self.msgtype = msgtype
        self.may_invite = may_invite
        self.state: KeyValue = MemoryKeyValue()
        self._client: nio.AsyncClient | None = None
        self._stop = anyio.Event()
        self._connected = False
        self._display_name = ""
        self.media: MediaIntake | None = None
        self.encryption = encryption
        self.store = store
        """The key store folder (with encryption)."""
        if encryption and store is None:
            raise ValueError("matrix encryption needs a key store folder")
        self._warned_rooms: set[str] = set()
        self.findings: list[str] = []
        """What `check` found worth fixing that is not a failure (for `rousseau doctor`)."""
        self._trust_applied = ""

    def bind_media(self, media: MediaIntake) -> None:
        """Take m.image, m.file, m.audio and m.video in (unbound, only text is answered)."""
        self.media = media

    def bind_state(self, state: KeyValue) -> None:
        """Where the session token and the sync position are kept across restarts."""
        self.state = state

    @property
    def connected(self) -> bool:
        return self._connected

    def _client_for(self) -> nio.AsyncClient:
        if not self.encryption:
            config = nio.AsyncClientConfig(max_timeouts=MAX_TIMEOUTS, encryption_enabled=False)
            client = SyncChecked(self.homeserver_url, self.user_id, config=config)
        else:
            assert self.store is not None
            if not nio.crypto.ENCRYPTION_ENABLED:
                raise MissingExtraError("matrix.encryption", "matrix")
            private_folder(self.store)
            config = nio.AsyncClientConfig(
                max_timeouts=MAX_TIMEOUTS,
                encryption_enabled=True,
                store_sync_tokens=False,  # the sync position is the transport's own
                pickle_key=self._pickle_key(),
            )
            client = SyncChecked(
                self.homeserver_url, self.user_id, store_path=str(self.store), config=config
            )
        client.transport = self
        return client

    def _pickle_key(self) -> str:
        """The key nio's store is pickled with, made once and kept beside it (0600): the
        folder's mode is what protects both."""
        assert self.store is not None
        path = self.store / "pickle.key"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            key = secrets.token_urlsafe(32)
            write_private(path, key)
            return key

    async def _saved_session(self) -> dict[str, str] | None:
        """The login kept from an earlier start: with encryption, in the key store (the
        device is this machine's), else in the transport state."""
        if self.encryption:
            assert self.store is not None
            path = self.store / "session.json"
            raw = path.read_text() if path.exists() else ""
        else:
            raw = await self.state.get("session") or ""
        return json.loads(raw) if raw else None

    async def _save_session(self, session: dict[str, str] | None) -> None:
        raw = json.dumps(session) if session is not None else ""
        if not self.encryption:
            await self.state.set("session", raw)
            return
        assert self.store is not None
        path = self.store / "session.json"
        if session is None:
            path.unlink(missing_ok=True)
            return
        write_private(path, raw)

    async def _refused(self, doing: str, reply: Any) -> TransportError:
        """An error answer in rousseau's tree. A refused token from the config is permanent;
        a refused saved login is forgotten, so the next start logs in afresh."""
        code, detail = reply.status_code, describe(str(reply.message), self.access_token)
        if code in _TOKEN_REFUSED:
            if self.access_token:
                return TransportAuthError(
                    f"matrix.access_token: the homeserver rejected the access token ({code}); "
                    f"set a valid token for {self.user_id}"
                )
            await self._save_session(None)
            return TransportError(f"matrix: the saved login was revoked ({code}); logging in again")
        return TransportError(f"matrix: {doing} failed ({code} {detail})")

    def _unreachable(self, exc: BaseException) -> TransportError:
        return TransportError(f"matrix: {describe(exc, self.access_token, self.password)}")

    async def _login(self, client: nio.AsyncClient) -> None:
        saved = await self._saved_session()
        if self.access_token:
            self._restore(client, self.user_id, self.device_id or "", self.access_token)
        elif saved:
            self._restore(client, saved["user_id"], saved["device_id"], saved["access_token"])
        else:
            reply = await client.login(password=self.password, device_name="rousseau")
            if not isinstance(reply, nio.LoginResponse):
                if reply.status_code in _LOGIN_REFUSED:
                    raise TransportAuthError(
                        f"matrix.password: the homeserver refused the login of {self.user_id} "
                        f"({reply.status_code}); set the account's password"
                    )
                raise await self._refused("login", reply)
            await self._save_session(
                {
                    "access_token": reply.access_token,
                    "user_id": reply.user_id,
                    "device_id": reply.device_id,
                }
            )
            self._private_store()
        who = await client.whoami()
        if not isinstance(who, nio.WhoamiResponse):
            raise await self._refused("whoami", who)
        name = await client.get_displayname(self.user_id)
        self._display_name = getattr(name, "displayname", None) or ""

    def _restore(self, client: nio.AsyncClient, user_id: str, device_id: str, token: str) -> None:
        """A login already made; with encryption, the device's key store loaded with it."""
        if not self.encryption:
            client.access_token, client.user_id, client.device_id = token, user_id, device_id
            return
        if not device_id:
            raise TransportAuthError(
                "matrix.device_id: with encryption and an access_token, name the token's device"
            )
        client.restore_login(user_id, device_id, token)
        self._private_store()

    def _private_store(self) -> None:
        """Every file of the key store 0600 (nio makes its database with the umask's mode;
        the folder, 0700, kept it private meanwhile)."""
        if self.store is not None and self.encryption:
            for path in self.store.iterdir():
                if path.is_file():
                    path.chmod(0o600)

    async def _keys(self, client: nio.AsyncClient) -> None:
        """What encryption needs after a sync: one-time keys uploaded, new devices' keys
        queried, sessions claimed, to-device messages (room keys) sent; the owner's device
        decisions applied, and the devices known published for the CLI."""
        if client.olm is None:
            return
        if client.should_upload_keys:
            uploaded = await client.keys_upload()
            if isinstance(uploaded, nio.KeysUploadError):
                if "already exists" in str(uploaded.message):
                    raise TransportAuthError(
                        f"matrix.encryption: the homeserver holds keys for device "
                        f"{client.device_id} that this machine's key store does not (it was "
                        f"made elsewhere, or lost); unset access_token and log in with the "
                        f"password so this daemon gets a device of its own"
                    )
                raise await self._refused("uploading keys", uploaded)
        queried = False
        if client.should_query_keys:
            await client.keys_query()
            queried = True
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())
        await client.send_to_device_messages()
        await self._apply_trust(client, force=queried)

    async def _apply_trust(self, client: nio.AsyncClient, *, force: bool = False) -> None:
        """The owner's decisions (`rousseau matrix verify|block`, kept in the transport
        state) applied to the devices the bot knows; and those devices published."""
        raw = await self.state.get(TRUST_KEY) or "{}"
        if raw == self._trust_applied and not force:
            return
        decisions: dict[str, str] = json.loads(raw)
        for key, verdict in decisions.items():
            user, _, device_id = key.partition(" ")
            device = client.device_store.active_user_devices(user)
            found = next((d for d in device if d.id == device_id), None)
            if found is None:
                continue
            if verdict == "verify" and not found.verified:
                client.verify_device(found)
            elif verdict == "block" and not found.blacklisted:
                client.blacklist_device(found)
            elif verdict == "unverify" and found.verified:
                client.unverify_device(found)
            elif verdict == "unblock" and found.blacklisted:
                client.unblacklist_device(found)
        self._trust_applied = raw
        known = [
            {
                "user": d.user_id,
                "device": d.id,
                "name": d.display_name or "",
                "ed25519": d.ed25519,
                "trust": d.trust_state.name,
            }
            for user in client.device_store.users
            for d in client.device_store.active_user_devices(user)
        ]
        await self.state.set(DEVICES_KEY, json.dumps(known))

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        client = self._client = self._client_for()
        try:
            await self._login(client)
            since = await self.state.get("since")
            if not since:
                # First start: take the current position; history before it is not answered.
                first = await client.sync(timeout=0, full_state=True)
                if not isinstance(first, nio.SyncResponse):
                    raise await self._refused("sync", first)
                await self._invites(client, first)
                await self._keys(client)
                self._encrypted_joined(client)
                since = first.next_batch
                await self.state.set("since", since)
            else:
                await self._keys(client)  # a new start's keys go up before any sync waits
            self._connected = True
            log.info("matrix.connected", user=self.user_id, encryption=client.olm is not None)
            task_status.started()
            with anyio.CancelScope() as scope:
                self._scope = scope
                while not self._stop.is_set():
                    reply = await client.sync(timeout=SYNC_TIMEOUT_MS, since=since)
                    if not isinstance(reply, nio.SyncResponse):
                        raise await self._refused("sync", reply)
                    await self._invites(client, reply)
                    await self._keys(client)
                    self._encrypted_joined(client)
                    await self._messages(client, reply, handler)
                    since = reply.next_batch
                    await self.state.set("since", since)  # only after every event was taken
        except TransportError:
            raise  # already ours (and a ConnectionError, which _FAILURES would catch)
        except _FAILURES as exc:
            raise self._unreachable(exc) from exc
        finally:
            self._connected = False
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _invites(self, client: nio.AsyncClient, reply: nio.SyncResponse) -> None:
        for room_id, info in reply.rooms.invite.items():
            inviter = next(
                (
                    e.sender
                    for e in info.invite_state
                    if isinstance(e, nio.InviteMemberEvent) and e.state_key == self.user_id
                ),
                None,
            )
            if inviter and self.may_invite(inviter):
                joined = await client.join(room_id)
                log.info(
                    "matrix.joined",
                    room=room_id,
                    inviter=inviter,
                    ok=isinstance(joined, nio.JoinResponse),
                )
            else:
                log.info("matrix.invite_ignored", room=room_id, inviter=inviter)

    async def _messages(
        self, client: nio.AsyncClient, reply: nio.SyncResponse, handler: InboundHandler
    ) -> None:
        """The sync's messages, by room (see take_by_chat); a failure is raised once every
        room is done, and the sync is taken again (the `since` token stays)."""
        received: list[tuple[Inbound, Incoming | None]] = []
        for room_id, info in reply.rooms.join.items():
            for event in info.timeline.events:
                read = self._read(client, room_id, event)
                if read is not None:
                    received.append(read)

        async def take(message: tuple[Inbound, Incoming | None]) -> None:
            inbound, file = message
            if file is not None:
                inbound = await take_files(inbound, self.media, [file], unavailable=(_Unavailable,))
            await handler(inbound)

        failed = await take_by_chat(received, lambda message: message[0].chat_id, take)
        if failed:
            raise failed[min(failed)]

    def _read(
        self, client: nio.AsyncClient, room_id: str, event: Any
    ) -> tuple[Inbound, Incoming | None] | None:
        """A room event as the router takes it, checked, with its file; None for one not to
        answer, or one that cannot be read (recorded as failed: the sync position passes
        it with the rest). Never raises."""
        try:
            if isinstance(event, nio.BadEvent | nio.UnknownBadEvent):
                if event.source.get("type") != "m.room.message":
                    return None
                raise Unreadable("a message event that does not match its schema")
            found = self._normalise(client, room_id, event)
            return None if found is None else (checked(found[0]), found[1])
        except Exception as exc:
            message = getattr(event, "event_id", None)
            refuse(self, exc, room=room_id, message=message)
            return None

    def _normalise(
        self, client: nio.AsyncClient, room_id: str, event: Any
    ) -> tuple[Inbound, Incoming | None] | None:
        if event.sender == self.user_id:
            return None
        if isinstance(event, nio.MegolmEvent):
            self._undecryptable(client, room_id, event)
            return None
        content = event.source.get("content", {})
        if isinstance(event, nio.RoomMessageText):
            said, file = text(event.body, "body"), None
        elif (
            isinstance(event, nio.RoomMessageMedia | nio.RoomEncryptedMedia)
            and self.media is not None
        ):
            said, file = self._caption(event, content), self._incoming(client, event)
        else:
            return None
        if "m.new_content" in content:
            return None  # an edit
        room = client.rooms.get(room_id)
        members = room.joined_count if room is not None else 0
        inbound = Inbound(
            transport=self.name,
            chat_id=room_id,
            sender_id=event.sender,
            message_id=event.event_id,
            text=said,
            is_group=members > 2,
            mentioned=self._mentions_me(said, content),
            sender_name=room.user_name(event.sender) or "" if room else "",
            at=number(event.server_timestamp, "origin_server_ts") / 1000,
        )
        return inbound, file

    def _undecryptable(self, client: nio.AsyncClient, room_id: str, event: Any) -> None:
        """An encrypted event the bot cannot read: without encryption, the room is named
        once (set matrix.encryption); with it, the event is (its keys were not shared with
        this device)."""
        if client.olm is None:
            self._warn_encrypted(room_id)
            return
        log.warning("matrix.undecryptable", room=room_id, event=event.event_id, sender=event.sender)

    def _warn_encrypted(self, room_id: str) -> None:
        """One line, once, for an encrypted room joined without encryption."""
        if room_id not in self._warned_rooms:
            self._warned_rooms.add(room_id)
            log.warning(
                "matrix.encrypted_room",
                room=room_id,
                hint="this room is end-to-end encrypted: set matrix.encryption: true to "
                "read and answer it",
            )

    def _encrypted_joined(self, client: nio.AsyncClient) -> None:
        """Without encryption, each encrypted room the bot is in (its state seen in a sync:
        on joining, or at a first start) named once, before anyone writes there."""
        if client.olm is None:
            for room_id, room in client.rooms.items():
                if room.encrypted:
                    self._warn_encrypted(room_id)

    @staticmethod
    def _caption(event: Any, content: dict[str, Any]) -> str:
        """A media event's caption: its body, when a `filename` beside it names the file
        (Matrix 1.10); otherwise the body is only the file's name."""
        filename = content.get("filename")
        return text(event.body, "body") if filename and event.body != filename else ""

    def _incoming(self, client: nio.AsyncClient, event: Any) -> Incoming:
        content = event.source.get("content", {})
        info = content.get("info") or {}
        if not isinstance(info, dict):
            raise Unreadable(f"info is {type(info).__name__}, not an object")
        duration = info.get("duration")
        fetch = functools.partial(self._download, client, event.url)
        if isinstance(event, nio.RoomEncryptedMedia):
            fetch = functools.partial(self._download_encrypted, client, event)
        return Incoming(
            name=text(content.get("filename") or event.body, "filename") or "file",
            media_type=text(info.get("mimetype") or event.mimetype, "mimetype"),
            size=info.get("size") if isinstance(info.get("size"), int) else None,
            fetch=fetch,
            voice=VOICE in content,
            duration=duration / 1000 if isinstance(duration, int | float) else None,
        )

    async def _download(self, client: nio.AsyncClient, mxc: str, into: Download) -> None:
        """From the media repository, authenticated, streamed: nio's download reads the body
        whole (or saves all of it), so the request is the one it makes (the spec's
        /_matrix/client/v1/media path, the token in a header), its body read a chunk at a
        time; an error answer is still read by nio."""
        where = urlsplit(mxc)
        server, media = quote(where.netloc, safe=""), quote(where.path.lstrip("/"), safe="")
        path = f"/_matrix/client/v1/media/download/{server}/{media}?allow_remote=true"
        headers = {"Authorization": f"Bearer {client.access_token}"}
        timeout = aiohttp.ClientTimeout(sock_connect=30, sock_read=120)
        async with await client.send("GET", path, headers=headers, timeout=timeout) as response:
            if response.status == 200:
                into.declared(response.content_length)
                await into.write_all(response.content.iter_chunked(CHUNK))
                return
            status = response.status
            reply = await client.create_matrix_response(nio.MemoryDownloadResponse, response)
        if not isinstance(reply, nio.DownloadError):  # an error page, not the file
            raise TransportError(f"matrix: downloading a file: HTTP {status}")
        if reply.status_code in _GONE:
            raise _Unavailable(f"{mxc}: {reply.status_code}")
        raise await self._refused("downloading a file", reply)

    async def _download_encrypted(
        self, client: nio.AsyncClient, event: Any, into: Download
    ) -> None:
        """An encrypted file (an encrypted room's attachment): the ciphertext fetched into
        memory (never more than the intake's limit: AES-CTR keeps the length), its hash
        checked and decrypted by nio, then taken in."""
        cipher = bytearray()

        class Sink:
            def declared(self, size: int | None) -> None:
                into.declared(size)

            async def write_all(self, chunks: Any) -> None:
                async for chunk in chunks:
                    cipher.extend(chunk)
                    if len(cipher) > into.limit:
                        into.declared(len(cipher))  # TooLarge

        await self._download(client, event.url, Sink())  # type: ignore[arg-type]
        try:
            plain = await anyio.to_thread.run_sync(
                nio.crypto.attachments.decrypt_attachment,
                bytes(cipher),
                event.key["k"],
                event.hashes["sha256"],
                event.iv,
            )
        except (nio.EncryptionError, KeyError, ValueError, TypeError) as exc:
            raise Unreadable(f"an encrypted file that does not decrypt: {exc}") from exc
        await into.write(plain)

    def _mentions_me(self, body: str, content: dict[str, Any]) -> bool:
        mentions = content.get("m.mentions") or {}
        named = mentions.get("user_ids") if isinstance(mentions, dict) else None
        if isinstance(named, list) and self.user_id in named:
            return True
        lowered = body.lower()
        localpart = self.user_id.split(":")[0].lstrip("@").lower()
        names = [self.user_id.lower(), localpart]
        if self._display_name:
            names.append(self._display_name.lower())
        return any(n and n in lowered for n in names)

    async def send(self, message: Outbound) -> None:
        assert self._client is not None, "the transport is not running"
        if message.attachment is not None:
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                message = data
            else:
                return await self._send_file(self._client, message, data)
        content = self._text(message.text)
        if message.replaces is not None:  # a streamed preview becomes the answer
            content = _replacing(message.replaces, content)
        await self._room_send(self._client, message.chat_id, content)

    def _text(self, text: str) -> dict[str, Any]:
        return {
            "msgtype": self.msgtype,
            "body": text,
            "format": "org.matrix.custom.html",
            "formatted_body": markdown.markdown(text, extensions=["fenced_code"]),
        }

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: sent, then replaced (`m.replace`) in place (see
        rousseau.streaming); returns the first event's id, which every edit refers to."""
        assert self._client is not None, "the transport is not running"
        content = self._text(text)
        if message_id is not None:
            content = _replacing(message_id, content)
        self._encrypted(self._client, chat_id)
        try:
            reply = await self._client.room_send(
                chat_id, "m.room.message", content, ignore_unverified_devices=True
            )
        except _FAILURES as exc:
            raise self._unreachable(exc) from exc
        if isinstance(reply, nio.RoomSendResponse):
            return message_id or str(reply.event_id)
        if reply.status_code == "M_LIMIT_EXCEEDED":
            raise Throttled((reply.retry_after_ms or 1000) / 1000)
        raise await self._refused("a preview", reply)

    async def _send_file(self, client: nio.AsyncClient, message: Outbound, data: bytes) -> None:
        """Uploaded to the media repository, then sent as m.image (shown inline), m.audio (a
        voice note: with the voice flag, its duration and waveform), m.video or m.file, the
        text as its caption (Matrix 1.10: `body` beside `filename`)."""
        attachment = message.attachment
        assert attachment is not None
        name = attachment.name or "file"
        encrypted = self._encrypted(client, message.chat_id)
        keys: dict[str, Any] = {}
        if encrypted:  # the file is encrypted too; the homeserver sees only ciphertext
            data, keys = await anyio.to_thread.run_sync(
                nio.crypto.attachments.encrypt_attachment, data
            )
        try:
            uploaded, _ = await client.upload(
                lambda *_: io.BytesIO(data),  # called again if the upload is retried
                content_type="application/octet-stream" if encrypted else attachment.media_type,
                filename=name,
                filesize=len(data),
            )
        except _FAILURES as exc:
            raise self._unreachable(exc) from exc
        if not isinstance(uploaded, nio.UploadResponse):
            raise await self._refused("uploading a file", uploaded)
        major = attachment.media_type.partition("/")[0]
        content = {
            "msgtype": _MSGTYPES.get(major, "m.file"),
            "body": message.text or name,
            "filename": name,
            "url": uploaded.content_uri,
            "info": {"mimetype": attachment.media_type, "size": len(data)},
        }
        if encrypted:
            del content["url"]
            content["file"] = {"url": uploaded.content_uri, "mimetype": attachment.media_type}
            content["file"].update(keys)
        if attachment.voice:  # a voice message (MSC3245): clients draw it with a play button
            millis = round(attachment.duration * 1000)
            waveform = [round(v * 1024 / 255) for v in attachment.waveform]  # MSC1767: 0-1024
            content["info"] = {**content["info"], "duration": millis}
            content["org.matrix.msc1767.audio"] = {"duration": millis, "waveform": waveform}
            content["org.matrix.msc3245.voice"] = {}
        await self._room_send(client, message.chat_id, content)

    def _encrypted(self, client: nio.AsyncClient, room_id: str) -> bool:
        """Whether what goes to `room_id` is encrypted. A room known to be encrypted, when
        this client cannot encrypt, is a TransportError: never plain text there."""
        room = client.rooms.get(room_id)
        encrypted = room_id in client.encrypted_rooms or (room is not None and room.encrypted)
        if encrypted and client.olm is None:
            raise TransportError(
                f"matrix: {room_id} is end-to-end encrypted and matrix.encryption is off; "
                "nothing is sent there in plain text"
            )
        return encrypted

    async def _room_send(
        self, client: nio.AsyncClient, room: str, content: dict[str, Any], kind: str = ""
    ) -> None:
        self._encrypted(client, room)
        try:
            # Trust on first use: a device seen for the first time gets the room key (it is
            # marked ignored); one the owner blocked does not.
            reply = await client.room_send(
                room, kind or "m.room.message", content, ignore_unverified_devices=True
            )
        except _FAILURES as exc:
            raise self._unreachable(exc) from exc
        if not isinstance(reply, nio.RoomSendResponse):
            raise await self._refused("sending", reply)

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """`emoji` on the sender's event (an `m.annotation`, as clients show reactions)."""
        if self._client is None:
            return
        content = {
            "m.relates_to": {
                "rel_type": "m.annotation",
                "event_id": inbound.message_id,
                "key": emoji,
            }
        }
        await self._room_send(self._client, inbound.chat_id, content, "m.reaction")

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        if self._client is not None:
            try:
                await self._client.room_typing(chat_id, True, timeout=10_000)
            except _FAILURES as exc:
                raise self._unreachable(exc) from exc

    async def stop(self) -> None:
        self._stop.set()
        scope = getattr(self, "_scope", None)
        if scope is not None:
            scope.cancel()

    async def check(self) -> str:
        """whoami with the configured credentials: proves the homeserver and the login.
        Without encryption, the encrypted rooms the bot is in become `findings`."""
        client = self._client_for()
        try:
            await self._login(client)
            if client.olm is None:
                rooms = await self._encrypted_rooms(client)
                self.findings = (
                    [
                        f"matrix.encryption is off, and {len(rooms)} joined room(s) are end-to-end "
                        f"encrypted ({', '.join(rooms[:3])}{', ...' if len(rooms) > 3 else ''}): "
                        "what is said there goes unanswered; set matrix.encryption: true"
                    ]
                    if rooms
                    else []
                )
            return self.user_id
        except TransportError:
            raise
        except _FAILURES as exc:
            raise self._unreachable(exc) from exc
        finally:
            await client.close()

    async def _encrypted_rooms(self, client: nio.AsyncClient) -> list[str]:
        """The joined rooms with end-to-end encryption on (of the first ROOMS_CHECKED)."""
        joined = await client.joined_rooms()
        if not isinstance(joined, nio.JoinedRoomsResponse):
            return []
        found = []
        for room_id in joined.rooms[:ROOMS_CHECKED]:
            state = await client.room_get_state_event(room_id, "m.room.encryption")
            if isinstance(state, nio.RoomGetStateEventResponse):
                found.append(room_id)
        return found

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
