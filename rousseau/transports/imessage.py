"""iMessage through a BlueBubbles server's REST API (the server runs on a Mac signed in to
Messages). BlueBubbles has no Python SDK: its API is a handful of JSON endpoints, spoken here
with httpx.

New messages are polled with a cursor (the newest creation time seen, and the message guids
at that instant) kept in the store, so a restart neither replays old messages nor skips new
ones; the router's duplicate check covers the gap between handing a message over and saving
the cursor.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.base import describe, file_bytes, take_by_chat, take_files
from rousseau.transports.unreadable import Unreadable, checked, ident, number, refuse, text

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger("rousseau.imessage")

MAX_LENGTH = 4000
PAGE = 100
MAX_FILE_BYTES = 100_000_000
"""What send_file may attach: iMessage itself takes files far larger."""
_ATTACHMENT_MARK = "\ufffc"


class IMessageError(TransportError):
    """The BlueBubbles server could not be reached or refused a call."""


class _Gone(Exception):
    """An attachment the Mac no longer has."""


def is_group_chat(chat_guid: str) -> bool:
    """`iMessage;-;+1555…` is a one-to-one chat, `iMessage;+;chat…` a group."""
    return ";+;" in chat_guid


class IMessageTransport:
    name = "imessage"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(
        self,
        base_url: str,
        password: str,
        *,
        poll_interval: float = 5.0,
        private_api: bool = False,
        mention_names: Sequence[str] = ("rousseau",),
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.password = password
        self.poll_interval = poll_interval
        self.private_api = private_api
        names = "|".join(re.escape(n) for n in mention_names if n)
        self._mention = re.compile(rf"(?<!\w)@?(?:{names})(?!\w)", re.I) if names else None
        self.timeout = timeout
        self._state: KeyValue = MemoryKeyValue()
        self._client: httpx.AsyncClient | None = None
        self._connected = False
        self._stop = anyio.Event()
        self.media: MediaIntake | None = None
        self._caption_due: dict[tuple[str, str, str], None] = {}
        """Files sent whose caption is still to go: a retry of the part sends only that."""

    def bind_state(self, state: KeyValue) -> None:
        self._state = state

    def bind_media(self, media: MediaIntake) -> None:
        """Take attachments in (unbound, only the text)."""
        self.media = media

    @property
    def connected(self) -> bool:
        return self._connected

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout)
        return self._client

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        files: dict[str, tuple[str, bytes, str]] | None = None,
    ) -> Any:
        """One API call (a JSON body, or a form with `files`); returns its `data`. Errors
        never carry the URL (it holds the password)."""
        response = await self._request(method, path, body, files)
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        return payload.get("data")

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        files: dict[str, tuple[str, bytes, str]] | None = None,
        *,
        into: Download | None = None,
    ) -> httpx.Response:
        """The answer to one call, unless the server refused it (then an error, the
        password masked). With `into`, its body is streamed there (stopped at the
        download's limit) rather than read."""
        import httpx

        form = {"json": body} if files is None else {"data": body, "files": files}
        client = self._http()
        request = client.build_request(method, path, params={"password": self.password}, **form)
        try:
            response = await client.send(request, stream=True)
            try:
                if response.status_code != 200 or into is None:
                    await response.aread()
                else:
                    length = response.headers.get("content-length")
                    into.declared(int(length) if length and length.isdigit() else None)
                    await into.write_all(response.aiter_bytes(CHUNK))
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            detail = describe(f"{type(exc).__name__} {exc}", self.password)
            raise IMessageError(f"imessage: {path}: {detail}") from None
        if response.status_code == 401:
            raise TransportAuthError(
                "imessage.password: the BlueBubbles server answered HTTP 401 (wrong password); "
                "set the server's password"
            )
        if response.status_code != 200:
            try:
                payload = response.json()
            except ValueError:
                payload = {}
            detail = payload.get("error", {}).get("message") or payload.get("message") or ""
            detail = describe(str(detail), self.password)
            error = IMessageError(f"imessage: {path}: HTTP {response.status_code} {detail}".strip())
            error.status = response.status_code  # type: ignore[attr-defined]
            raise error
        return response

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        await self.call("GET", "/api/v1/ping")
        cursor = await self._load_cursor()
        self._connected = True
        log.info("imessage.connected", server=self.base_url)
        task_status.started()
        try:
            while not self._stop.is_set():
                if await self._poll(handler, cursor):
                    continue  # a full page: there is more
                with anyio.move_on_after(self.poll_interval):
                    await self._stop.wait()
        finally:
            self._connected = False

    async def _load_cursor(self) -> dict[str, Any]:
        stored = await self._state.get("cursor")
        if stored:
            cursor: dict[str, Any] = json.loads(stored)
            return cursor
        # first start: begin now, not with the Mac's whole message history
        cursor = {"at": int(time.time() * 1000), "guids": []}
        await self._state.set("cursor", json.dumps(cursor))
        return cursor

    async def _poll(self, handler: InboundHandler, cursor: dict[str, Any]) -> bool:
        """Take one page of new messages; true when the page was full."""
        body = {
            "limit": PAGE,
            "offset": 0,
            "sort": "ASC",
            "after": cursor["at"],
            "with": ["chat", "handle", "attachment"],
        }
        messages = await self.call("POST", "/api/v1/message/query", body) or []
        if not isinstance(messages, list):
            raise IMessageError(f"imessage: a message query answered {type(messages).__name__}")
        fresh = [message for message in messages if _unseen(message, cursor)]
        read = [(message, self._read(message)) for message in fresh]

        async def take(item: tuple[Any, tuple[Inbound, list[Incoming]] | None]) -> None:
            found = item[1]
            if found is not None:  # its files taken in before the cursor moves past it
                inbound, files = found
                inbound = await take_files(inbound, self.media, files, unavailable=(_Gone,))
                await handler(inbound)  # returns once persisted

        # By chat (see take_by_chat); the cursor passes what was taken up to a failure,
        # and what could not be read at once.
        failed = await take_by_chat(read, lambda item: item[1][0].chat_id if item[1] else "", take)
        taken = fresh[: min(failed, default=len(fresh))]
        for message in taken:
            at = _created(message)
            if at is not None and at > cursor["at"]:
                cursor["at"], cursor["guids"] = at, []
            cursor["guids"].append(_guid(message))
        if taken:
            await self._state.set("cursor", json.dumps(cursor))
        if failed:
            raise failed[min(failed)]
        return bool(fresh) and len(messages) >= PAGE

    def _read(self, message: Any) -> tuple[Inbound, list[Incoming]] | None:
        """A message as the router takes it, checked, with its attachments; None for one
        not to answer, or one that cannot be read (recorded as failed, and passed by the
        cursor like any other). Never raises."""
        try:
            if not isinstance(message, dict):
                raise Unreadable(f"a message of {type(message).__name__}, not an object")
            inbound = self._normalise(message)
            return None if inbound is None else (checked(inbound), self._files(message))
        except Exception as exc:
            guid = message.get("guid") if isinstance(message, dict) else None
            refuse(self, exc, message=guid if isinstance(guid, str) else None)
            return None

    def _normalise(self, message: dict[str, Any]) -> Inbound | None:
        if message.get("isFromMe"):
            return None
        said = text(message.get("text"), "text").replace(_ATTACHMENT_MARK, "").strip()
        chats = _listed(message, "chats")
        handle = message.get("handle") or {}
        sender = handle.get("address") if isinstance(handle, dict) else None
        files = self.media is not None and bool(_listed(message, "attachments"))
        if not (said or files) or not chats or not sender:
            return None  # reactions, system messages (and files, unless taken in)
        first = chats[0]
        chat = ident(first.get("guid") if isinstance(first, dict) else None, "chat guid")
        group = is_group_chat(chat)
        return Inbound(
            transport=self.name,
            chat_id=chat,
            sender_id=ident(sender, "handle address"),
            message_id=ident(message.get("guid"), "guid"),
            text=said,
            is_group=group,
            mentioned=group and self._mention is not None and bool(self._mention.search(said)),
            at=number(message.get("dateCreated") or 0, "dateCreated") / 1000,
        )

    def _files(self, message: dict[str, Any]) -> list[Incoming]:
        """A message's attachments, downloaded from the Mac when taken in. An audio
        message (recorded in Messages) is a voice note."""
        if self.media is None:
            return []
        return [
            Incoming(
                name=text(a.get("transferName"), "transferName") or "attachment",
                media_type=text(a.get("mimeType"), "mimeType"),
                size=a.get("totalBytes") if isinstance(a.get("totalBytes"), int) else None,
                fetch=functools.partial(self._download, ident(a["guid"], "attachment guid")),
                voice=bool(message.get("isAudioMessage")),
            )
            for a in _listed(message, "attachments")
            if isinstance(a, dict) and a.get("guid")
        ]

    async def _download(self, guid: str, into: Download) -> None:
        from urllib.parse import quote

        try:
            await self._request("GET", f"/api/v1/attachment/{quote(guid)}/download", into=into)
        except IMessageError as exc:
            if getattr(exc, "status", 0) in (404, 410):
                raise _Gone(str(exc)) from exc
            raise

    async def send(self, message: Outbound) -> None:
        if message.attachment is not None:
            key = (message.chat_id, message.attachment.sha256, message.text)
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                message = data
            elif key not in self._caption_due:  # else sent, and only its caption failed
                await self._send_file(message, data)
                if not message.text:
                    return
                self._caption_due[key] = None
                while len(self._caption_due) > 100:
                    self._caption_due.pop(next(iter(self._caption_due)))
            await self._send_text(message)
            self._caption_due.pop(key, None)
            return
        await self._send_text(message)

    async def _send_text(self, message: Outbound) -> None:
        body: dict[str, Any] = {
            "chatGuid": message.chat_id,
            "tempGuid": f"temp-{uuid.uuid4()}",
            "message": message.text,
            "method": "private-api" if self.private_api else "apple-script",
        }
        if self.private_api and message.reply_to:
            body["selectedMessageGuid"] = message.reply_to
            body["partIndex"] = 0
        await self.call("POST", "/api/v1/message/text", body)

    async def _send_file(self, message: Outbound, data: bytes) -> None:
        """The file (Messages shows an image inline); a caption follows as its own message,
        as BlueBubbles sends a file without text."""
        attachment = message.attachment
        assert attachment is not None
        name = attachment.name or "file"
        form = {
            "chatGuid": message.chat_id,
            "tempGuid": f"temp-{uuid.uuid4()}",
            "name": name,
            "method": "private-api" if self.private_api else "apple-script",
        }
        files = {"attachment": (name, data, attachment.media_type)}
        await self.call("POST", "/api/v1/message/attachment", form, files=files)

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        if self.private_api:  # plain AppleScript cannot show typing
            from urllib.parse import quote

            await self.call("POST", f"/api/v1/chat/{quote(chat_id, safe='')}/typing")

    async def stop(self) -> None:
        self._stop.set()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def check(self) -> str:
        info = await self.call("GET", "/api/v1/server/info") or {}
        return (
            f"BlueBubbles {info.get('server_version', '?')} on macOS "
            f"{info.get('os_version', '?')} (private API "
            f"{'on' if info.get('private_api') else 'off'})"
        )


def _unseen(message: Any, cursor: dict[str, Any]) -> bool:
    """Not passed by the cursor yet (the server's `after` is inclusive). One without a
    creation time to compare is unseen until the cursor holds its guid."""
    at = _created(message)
    if at is None:
        return _guid(message) not in cursor["guids"]
    return at > cursor["at"] or (at == cursor["at"] and _guid(message) not in cursor["guids"])


def _created(message: Any) -> int | None:
    """When a message was created (ms), 0 if not said; None if it cannot be read."""
    if not isinstance(message, dict):
        return None
    at = message.get("dateCreated") or 0
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return int(at)


def _guid(message: Any) -> str:
    guid = message.get("guid") if isinstance(message, dict) else None
    return guid if isinstance(guid, str) else ""


def _listed(message: dict[str, Any], key: str) -> list[Any]:
    """A list a message carries (its chats, its attachments): none when absent."""
    found = message.get(key) or []
    if not isinstance(found, list):
        raise Unreadable(f"{key} is {type(found).__name__}, not a list")
    return found
