"""Mattermost through its REST API (v4) and its websocket event stream, on aiohttp.

A thin client of our own: the Python driver (mattermostdriver) makes its REST calls with
requests, which would block the event loop, and has had no release since 2022; the official
clients are Go and JavaScript. What the bot needs is a dozen documented calls.

Direct and group messages are answered; in channels a post that @-mentions the bot is, and
the answer goes in the post's thread. A reply is shown
as it is written by editing one post; files come in through the media intake and go out as
uploads. A dropped stream ends `run` with a TransportError (the supervisor reconnects with
backoff); on the way back, the posts missed in the channels the bot has talked in are fetched
and taken in order (the inbox drops what it already has).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.abilities import Posts
from rousseau.transports.base import Throttled, file_bytes, take_files
from rousseau.transports.unreadable import (
    Unreadable,
    checked,
    ident,
    number,
    optional_text,
    refuse,
    text,
)

try:
    import aiohttp
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the mattermost transport", "mattermost") from exc

log = structlog.get_logger("rousseau.mattermost")

MAX_LENGTH = 16_383
"""Characters of one post (the server's default MaxPostSize)."""
MAX_FILE_BYTES = 100 * 1024 * 1024
"""The server's default FileSettings.MaxFileSize."""
CHANNELS = 1000
"""Channels whose kind is remembered (a bounded cache: one lookup each when forgotten)."""
CAUGHT_UP = "caught_up"
"""The state's key: {channel id: the create_at of the last post taken there}."""
VOICE = "voice"
"""The type of a post made by recording a voice message in the app."""
BOT = ("true", True)
"""`props.from_bot` of a bot's post (a string in posts, a boolean in some plugins')."""
EMOJI_NAME = re.compile(r"[a-z0-9_+-]{1,64}")
_FAILURES = (aiohttp.ClientError, OSError, TimeoutError)
_UNREADABLE = (Unreadable, ValueError, TypeError, KeyError, AttributeError)
"""What reading an event of the wrong shape raises (recorded and skipped, never a restart)."""
_TOKEN = (
    "mattermost.token: the server refused it ({status}); use a bot account's access token "
    "(System Console > Integrations > Bot Accounts) or a personal access token"
)


class Refused(TransportError):
    """The server answered a call with an error (its status kept: a 404 is not a 500)."""

    def __init__(self, status: int, call: str, said: str) -> None:
        super().__init__(f"mattermost: {call} answered {status}: {said}")
        self.status = status


class MattermostTransport:
    name = "mattermost"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(self, url: str, token: str, *, actions: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.actions_url = actions[0] if actions else None
        """Where Mattermost posts a button's press; None: no buttons (answers are typed)."""
        self.posts: Posts | None = (
            Posts(
                transport=self.name,
                listen=actions[1],
                path=urlsplit(actions[0]).path or "/",
                take=self._take_press,
            )
            if actions
            else None
        )
        self._handler: InboundHandler | None = None
        self.state: KeyValue = MemoryKeyValue()
        self.media: MediaIntake | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._me = ""
        self._username = ""
        self._seen: dict[str, float] = {}
        """Channel id -> the create_at of the last post taken there."""
        self._kinds: OrderedDict[str, str] = OrderedDict()
        """Channel id -> its type (D direct, G group, O open, P private), most recent last."""
        self._stop = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def bind_media(self, media: MediaIntake) -> None:
        self.media = media

    def _session_for(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=aiohttp.ClientTimeout(total=120, sock_connect=20),
            )
        return self._session

    async def _api(
        self, method: str, path: str, *, body: Any = None, data: Any = None, **params: str
    ) -> Any:
        """One REST call; its JSON answer. A 401 is a TransportAuthError naming the key, a
        429 Throttled (with the wait the server asks for), any other error a TransportError
        with the server's message."""
        try:
            async with self._session_for().request(
                method, f"{self.url}/api/v4{path}", json=body, data=data, params=params or None
            ) as response:
                if response.status == 401:
                    raise TransportAuthError(_TOKEN.format(status=401))
                if response.status == 429:
                    raise Throttled.asked(response.headers, "Retry-After", "X-Ratelimit-Reset")
                if response.status >= 400:
                    said = await response.text()
                    raise Refused(response.status, f"{method} {path}", _message(said))
                return await response.json(content_type=None)
        except TransportError:
            raise  # ours (a ConnectionError too, which _FAILURES would take)
        except _FAILURES as exc:
            raise TransportError(f"mattermost: cannot reach {self.url}: {exc}") from exc

    async def _whoami(self) -> None:
        me = await self._api("GET", "/users/me")
        self._me, self._username = str(me["id"]), str(me["username"])

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        await self._whoami()
        self._handler = handler  # presses are taken from here on (see _take_press)
        address = re.sub(r"^http", "ws", self.url) + "/api/v4/websocket"
        try:
            async with self._session_for().ws_connect(address, heartbeat=30) as ws:
                await ws.send_json(
                    {"seq": 1, "action": "authentication_challenge", "data": {"token": self.token}}
                )
                await self._hello(ws)
                self._ws = ws
                log.info("mattermost.connected", user=self._username)
                task_status.started()
                await self._catch_up(handler)
                async for frame in ws:
                    if frame.type == aiohttp.WSMsgType.TEXT:
                        await self._event(frame.data, handler)
                    elif frame.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
        except TransportError:
            raise
        except _FAILURES as exc:
            raise TransportError(f"mattermost: the event stream failed: {exc}") from exc
        finally:
            self._ws = None
            self._handler = None
        if not self._stop.is_set():
            raise TransportError("mattermost: the event stream closed")

    async def _hello(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Until the server accepts the token and says hello (a refusal names the key)."""
        with anyio.fail_after(30):
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    break
                said = json.loads(frame.data)
                if said.get("seq_reply") == 1 and said.get("status") == "FAIL":
                    raise TransportAuthError(_TOKEN.format(status="websocket"))
                if said.get("event") == "hello":
                    return
        raise TransportError("mattermost: the event stream closed before its hello")

    async def _event(self, raw: str, handler: InboundHandler) -> None:
        """One websocket event: a new post taken in; anything unreadable recorded and
        skipped (never a restart)."""
        try:
            event = _parsed(raw, "event")
            if not isinstance(event, dict) or event.get("event") != "posted":
                return
            data = event.get("data")
            if not isinstance(data, dict):
                raise Unreadable("posted event without data")
            post = _parsed(text(data.get("post"), "post"), "post")
            if not isinstance(post, dict):
                raise Unreadable("post is not an object")
            kind = optional_text(data.get("channel_type"), "channel_type")
            if kind:
                self._remember(ident(post.get("channel_id"), "channel_id"), kind)
            mentions = _parsed(text(data.get("mentions"), "mentions") or "[]", "mentions")
            mentioned = isinstance(mentions, list) and self._me in mentions
            sender = text(data.get("sender_name"), "sender_name").lstrip("@")
            read = await self._read(post, mentioned=mentioned, sender=sender)
        except _UNREADABLE as exc:
            refuse(self, exc, kind="posted", message=_short_id(raw))
            return
        await self._take(read, handler)

    async def _take(self, read: tuple[Inbound, list[Incoming], float] | None, handler: Any) -> None:
        if read is None:
            return
        inbound, files, at = read
        inbound = await take_files(inbound, self.media, files, unavailable=(TransportError,))
        await handler(inbound)
        await self._taken(inbound.chat_id, at)

    async def _read(
        self, post: dict[str, Any], *, mentioned: bool, sender: str = ""
    ) -> tuple[Inbound, list[Incoming], float] | None:
        """A post as the router takes it, with its files and its create_at; None for one not
        to answer (the bot's own, another bot's, a system message)."""
        user = ident(post.get("user_id"), "user_id")
        props = post.get("props")
        props = props if isinstance(props, dict) else {}
        kind_of_post = post.get("type") or ""
        if user == self._me or kind_of_post not in ("", VOICE) or props.get("from_bot") in BOT:
            return None  # our own, another bot's, a system message (a join, a header change)
        channel = ident(post.get("channel_id"), "channel_id")
        kind = await self._kind(channel)
        said = text(post.get("message", ""), "message")
        name = re.compile(rf"@{re.escape(self._username)}\b", re.IGNORECASE)
        mentioned = mentioned or bool(name.search(said))
        said = name.sub("", said).strip() if mentioned else said
        files = self._files(post, voice=kind_of_post == VOICE)
        if not said and not files:
            return None
        root = optional_text(post.get("root_id"), "root_id") or None
        post_id = ident(post.get("id"), "id")
        group = kind != "D"
        at = number(post.get("create_at"), "create_at")
        inbound = Inbound(
            transport=self.name,
            chat_id=channel,
            sender_id=user,
            message_id=post_id,
            text=said,
            is_group=group,
            mentioned=not group or mentioned,
            thread_id=(root or post_id) if group else root,
            sender_name=sender,
            at=at / 1000,
        )
        return checked(inbound), files, at

    def _files(self, post: dict[str, Any], *, voice: bool) -> list[Incoming]:
        """The files a post carries (their infos are in its metadata), to download; a voice
        message's recording is its one audio file."""
        if self.media is None:
            return []
        metadata = post.get("metadata") or {}
        infos = metadata.get("files") or [] if isinstance(metadata, dict) else None
        if not isinstance(infos, list) or not all(isinstance(i, dict) for i in infos):
            raise Unreadable("post metadata is not an object with a list of files")
        return [
            Incoming(
                name=text(info.get("name"), "file name"),
                media_type=text(info.get("mime_type") or "application/octet-stream", "mime"),
                size=int(number(info.get("size"), "file size")),
                fetch=functools.partial(self._download, ident(info.get("id"), "file id")),
                voice=voice and str(info.get("mime_type", "")).startswith("audio/"),
            )
            for info in infos
        ]

    async def _download(self, file_id: str, into: Download) -> None:
        try:
            async with self._session_for().get(f"{self.url}/api/v4/files/{file_id}") as response:
                if response.status >= 400:
                    raise TransportError(f"mattermost: file {file_id}: {response.status}")
                into.declared(response.content_length)
                await into.write_all(response.content.iter_chunked(CHUNK))
        except TransportError:
            raise
        except _FAILURES as exc:
            raise TransportError(f"mattermost: file {file_id}: {exc}") from exc

    def _remember(self, channel: str, kind: str) -> None:
        self._kinds[channel] = kind
        self._kinds.move_to_end(channel)
        while len(self._kinds) > CHANNELS:
            self._kinds.popitem(last=False)

    async def _kind(self, channel: str) -> str:
        if channel not in self._kinds:
            found = await self._api("GET", f"/channels/{channel}")
            self._remember(channel, text(found.get("type"), "channel type"))
        return self._kinds[channel]

    async def _taken(self, channel: str, at: float) -> None:
        """Where the stream is, per channel, for catching up after a reconnect (read once a
        run, written through)."""
        seen = self._seen
        if at > seen.get(channel, 0):
            seen[channel] = at
            while len(seen) > CHANNELS:
                seen.pop(min(seen, key=seen.__getitem__))
            await self.state.set(CAUGHT_UP, json.dumps(seen))

    async def _catch_up(self, handler: InboundHandler) -> None:
        """The posts made while the stream was down, in the channels the bot has taken posts
        in, oldest first; what the inbox already has it drops."""
        self._seen = json.loads(await self.state.get(CAUGHT_UP) or "{}")
        for channel, since in list(self._seen.items()):
            try:
                found = await self._api("GET", f"/channels/{channel}/posts", since=str(int(since)))
            except TransportError as exc:
                log.warning("mattermost.catch_up_failed", channel=channel, error=str(exc))
                continue
            posts = found.get("posts") or {}
            for post in sorted(posts.values(), key=lambda p: p.get("create_at", 0)):
                if post.get("create_at", 0) <= since or post.get("delete_at"):
                    continue
                try:
                    read = await self._read(post, mentioned=False)
                except _UNREADABLE as exc:
                    refuse(self, exc, kind="post", message=str(post.get("id"))[:40])
                    continue
                await self._take(read, handler)

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: posted, then the post edited (see rousseau.streaming)."""
        if message_id is None:
            body = {"channel_id": chat_id, "message": text, "root_id": thread_id or ""}
            return str((await self._api("POST", "/posts", body=body))["id"])
        await self._api("PUT", f"/posts/{message_id}/patch", body={"message": text})
        return message_id

    async def send(self, message: Outbound) -> None:
        """One post (a 429 raises Throttled: the outbox sends it again when the server
        said)."""
        if message.replaces is not None and not message.buttons:
            try:
                await self._api(
                    "PUT", f"/posts/{message.replaces}/patch", body={"message": message.text}
                )
                return
            except Refused as exc:
                if exc.status != 404:  # a preview deleted meanwhile is sent anew
                    raise
        body: dict[str, Any] = {
            "channel_id": message.chat_id,
            "message": message.text,
            "root_id": message.thread_id or "",
        }
        if message.buttons and self.actions_url:  # a press is posted back to the daemon
            body["props"] = {"attachments": [{"actions": self._buttons(message)}]}
        if message.attachment is not None:
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                body["message"] = data.text
            else:
                form = aiohttp.FormData()
                form.add_field("channel_id", message.chat_id)
                form.add_field(
                    "files",
                    data,
                    filename=message.attachment.name or "file",
                    content_type=message.attachment.media_type,
                )
                uploaded = await self._api("POST", "/files", data=form)
                body["file_ids"] = [info["id"] for info in uploaded["file_infos"]]
        await self._api("POST", "/posts", body=body)

    def _proof(self, chat_id: str, answer: str) -> str:
        """What a button carries to prove Mattermost got it from the bot (which signs nothing
        itself): an HMAC of its chat and answer under the bot's token."""
        said = f"{chat_id}\n{answer}".encode()
        return hmac.new(self.token.encode(), said, hashlib.sha256).hexdigest()

    def _buttons(self, message: Outbound) -> list[dict[str, Any]]:
        return [
            {
                "id": f"answer{n}",
                "name": label,
                "integration": {
                    "url": self.actions_url,
                    "context": {"answer": label, "proof": self._proof(message.chat_id, label)},
                },
            }
            for n, label in enumerate(message.buttons)
        ]

    async def _take_press(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """A button pressed: its answer taken as a message from whoever pressed it. 403 for a
        press the bot's buttons did not make; 503 when it could not be kept."""
        try:
            press = json.loads(body)
            context = press.get("context") or {}
            answer = text(context.get("answer"), "answer")
            channel = ident(press.get("channel_id"), "channel_id")
            user = ident(press.get("user_id"), "user_id")
            post = ident(press.get("post_id"), "post_id")
            proof = str(context.get("proof", ""))
        except _UNREADABLE as exc:
            refuse(self, exc if isinstance(exc, Unreadable) else Unreadable(str(exc)))
            return 400, ""
        if not hmac.compare_digest(proof, self._proof(channel, answer)):
            log.warning("mattermost.press_refused", channel=channel, user=user)
            return 403, ""
        handler = self._handler
        if handler is None:
            return 503, ""
        try:
            group = await self._kind(channel) != "D"
            inbound = Inbound(
                transport=self.name,
                chat_id=channel,
                sender_id=user,
                message_id=f"{post}/pressed/{user}/{answer}"[:200],
                text=answer,
                is_group=group,
                mentioned=True,
                sender_name=text(press.get("user_name"), "user_name"),
            )
            await handler(checked(inbound))
        except Exception as exc:
            log.info("mattermost.press_retry", post=post, error=type(exc).__name__)
            return 503, ""
        return 200, "{}"

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        body = {"channel_id": chat_id, "parent_id": thread_id or ""}
        await self._api("POST", "/users/me/typing", body=body)

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """`emoji`, by its name (eyes, or :eyes:), on the sender's post."""
        name = emoji.strip(":")
        if not EMOJI_NAME.fullmatch(name):
            log.warning("mattermost.emoji_not_a_name", emoji=emoji, hint="name it, e.g. eyes")
            return
        body = {"user_id": self._me, "post_id": inbound.message_id, "emoji_name": name}
        await self._api("POST", "/reactions", body=body)

    async def stop(self) -> None:
        self._stop.set()
        if self._ws is not None:
            await self._ws.close()

    async def check(self) -> str:
        """One harmless call (the bot's own user) proving the address and the token."""
        try:
            await self._whoami()
        finally:
            if self._ws is None:  # not running: nothing else needs the session
                await self.aclose()
        return f"@{self._username} on {self.url}"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _parsed(raw: str, what: str) -> Any:
    """JSON the server sent (Unreadable if it is not)."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise Unreadable(f"{what} is not JSON: {exc}") from None


def _message(body: str) -> str:
    """The `message` of a Mattermost error body, or the body's start."""
    try:
        said = json.loads(body)
    except ValueError:
        return body[:200]
    return str(said.get("message") or said)[:200] if isinstance(said, dict) else body[:200]


def _short_id(raw: str) -> str:
    return raw[:40]
