"""Slack through slack-bolt in Socket Mode: DMs, mentions, threads, mrkdwn.

An envelope is acknowledged only after the Router has persisted its message (bolt's
`process_before_response`), and a message is identified by channel + ts, never by the
envelope, so Slack's retries are answered once.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake, media_type_of
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.transports.base import Throttled, describe, file_bytes, take_files
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
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.errors import SlackApiError, SlackClientError
    from slack_sdk.http_retry.builtin_async_handlers import (
        AsyncConnectionErrorRetryHandler,
        AsyncRateLimitErrorRetryHandler,
    )
    from slack_sdk.web.async_client import AsyncWebClient
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the slack transport", "slack") from exc

log = structlog.get_logger("rousseau.slack")
ANSWER_ACTION = "rousseau_answer_"

HARD_LIMIT = 40_000
SOFT_LIMIT = 3_500  # long replies read better in several messages well before Slack's limit
MAX_FILE_BYTES = 100_000_000
"""What send_file may attach (Slack takes up to 1 GB; a file is held in memory to send)."""
STREAMS_KEPT = 256
"""Native streams remembered at once (one per reply being written)."""
_IGNORED_SUBTYPES = frozenset(
    {
        "bot_message",
        "message_changed",
        "message_deleted",
        "message_replied",
        "channel_join",
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "pinned_item",
    }
)
_REJECTED = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
    }
)
"""Web API errors that mean the token itself is refused: retrying cannot help."""
_FAILURES = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)
_TOKENS = {
    "slack.bot_token": "the bot token (xoxb-, from OAuth & Permissions)",
    "slack.app_token": "an app-level token (xapp-) with connections:write",
}


class SlackTransport:
    name = "slack"
    max_length = SOFT_LIMIT
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)
    shares_connections = True
    """Several daemons may each hold a connection (see Transport)."""

    def __init__(
        self,
        app_token: str,
        bot_token: str,
        *,
        bot_user_id: str | None = None,
        base_url: str | None = None,
        native_streams: bool = False,
    ) -> None:
        api = (base_url or "https://slack.com/api/").rstrip("/") + "/"
        retries = [
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
            AsyncConnectionErrorRetryHandler(),
        ]
        self.client = AsyncWebClient(token=bot_token, base_url=api, retry_handlers=retries)
        self._socket_client = AsyncWebClient(base_url=api, retry_handlers=retries)
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self._threads: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._stop = anyio.Event()
        self._socket: AsyncSocketModeHandler | None = None
        self.media: MediaIntake | None = None
        self.native_streams = native_streams
        """Stream replies in threads with Slack's own streaming methods (chat.startStream,
        appendStream, stopStream: `streaming: native`), where the workspace allows them."""
        self.raw_previews = native_streams
        """Previews carry the text as written: a native stream's Markdown is Slack's to
        render."""
        self._streams: OrderedDict[str, str] = OrderedDict()
        """Messages being streamed natively (by ts), with the text appended so far."""

    @property
    def connected(self) -> bool:
        client = self._socket.client if self._socket is not None else None
        session = getattr(client, "current_session", None)
        return session is not None and not session.closed

    def bind_state(self, state: KeyValue) -> None:
        """Slack keeps nothing here: Socket Mode delivers only what arrives while connected."""

    def _failed(self, key: str, doing: str, exc: BaseException) -> TransportError:
        """The SDK's error in rousseau's tree; a refused token (`key`) is permanent."""
        if isinstance(exc, SlackApiError):
            code = str(exc.response.get("error") or f"HTTP {exc.response.status_code}")
            if code in _REJECTED:
                return TransportAuthError(
                    f"{key}: the token was rejected by Slack ({code}); set {_TOKENS[key]}"
                )
            return TransportError(f"slack: {doing} failed ({code})")
        return TransportError(
            f"slack: {doing} failed ({describe(exc, self.app_token, self.client.token)})"
        )

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        user = await self.check_user_id()  # also when configured: proves the bot token
        self.bot_user_id = self.bot_user_id or user
        app = AsyncApp(client=self.client, process_before_response=True)

        async def on_message(event: dict[str, Any]) -> None:
            await self._on_event(event, handler, mention_event=False)

        async def on_mention(event: dict[str, Any]) -> None:
            await self._on_event(event, handler, mention_event=True)

        async def on_button(ack: Any, body: dict[str, Any]) -> None:
            await self._on_button(body, handler)
            await ack()  # after the press is persisted, as with events

        app.event("message")(on_message)
        app.event("app_mention")(on_mention)
        app.action(re.compile(f"^{ANSWER_ACTION}"))(on_button)
        self._socket = AsyncSocketModeHandler(app, self.app_token, web_client=self._socket_client)
        try:
            # The socket client retries a refused app token forever; ask for the URL here,
            # where a refusal can stop the transport, and hand it over.
            self._socket.client.wss_uri = await self._socket.client.issue_new_wss_url()
            await self._socket.connect_async()
        except _FAILURES as exc:
            await self._socket.close_async()
            raise self._failed("slack.app_token", "opening Socket Mode", exc) from exc
        log.info("slack.connected", bot=self.bot_user_id)
        task_status.started()
        try:
            await self._stop.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self._socket.close_async()

    async def check_user_id(self) -> str:
        """The bot's own user id (auth.test), proving the bot token."""
        try:
            auth = await self.client.auth_test()
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "auth.test", exc) from exc
        return str(auth["user_id"])

    async def check(self) -> str:
        """Two harmless calls proving both tokens: auth.test with the bot token, and
        apps.connections.open with the app-level one (a Socket Mode address, never used)."""
        user = await self.check_user_id()
        try:
            await self._socket_client.apps_connections_open(app_token=self.app_token)
        except _FAILURES as exc:
            raise self._failed("slack.app_token", "apps.connections.open", exc) from exc
        return f"<@{user}>"

    async def stop(self) -> None:
        self._stop.set()

    async def _on_event(
        self, event: dict[str, Any], handler: InboundHandler, *, mention_event: bool
    ) -> None:
        read = self._read(event, mention_event=mention_event)
        if read is not None:
            inbound, files = read
            unavailable = (aiohttp.ClientError, TimeoutError, PermissionError)
            await handler(await take_files(inbound, self.media, files, unavailable=unavailable))

    def _read(self, event: Any, *, mention_event: bool) -> tuple[Inbound, list[Incoming]] | None:
        """A message event as the router takes it, checked, with the files it shares; None
        for one not to answer, or one that cannot be read (recorded as failed). Never
        raises: bolt would only log it, and the message would be lost without a trace."""
        try:
            inbound = self._normalise(event, mention_event=mention_event)
            if inbound is None:
                return None
            return checked(inbound), self._files(event.get("files") or [])
        except Exception as exc:
            where = event.get("ts") if isinstance(event, dict) else None
            refuse(self, exc, message=where if isinstance(where, str) else None)
            return None

    def _normalise(self, event: dict[str, Any], *, mention_event: bool) -> Inbound | None:
        subtype = optional_text(event.get("subtype"), "subtype")
        if event.get("bot_id") or subtype in _IGNORED_SUBTYPES:
            return None  # our own and other bots' messages, edits, deletes, channel noise
        user = event.get("user")
        if not user or user == self.bot_user_id:
            return None
        channel, ts = ident(event.get("channel"), "channel"), ident(event.get("ts"), "ts")
        said = text(event.get("text"), "text")
        is_dm = event.get("channel_type") == "im" or channel.startswith("D")
        thread_ts = event.get("thread_ts")
        thread_ts = ident(thread_ts, "thread_ts") if thread_ts else None
        handle = f"<@{self.bot_user_id}>"
        mentioned = mention_event or handle in said
        thread = thread_ts if is_dm else thread_ts or ts
        in_our_thread = thread is not None and (channel, thread) in self._threads
        return Inbound(
            transport=self.name,
            chat_id=channel,
            sender_id=ident(user, "user"),
            message_id=f"{channel}:{ts}",
            text=said.replace(handle, "").strip(),
            is_group=not is_dm,
            mentioned=mentioned or in_our_thread,
            thread_id=thread,
            at=number(float(ts), "ts"),
        )

    def bind_media(self, media: MediaIntake) -> None:
        """Take shared files in (unbound, only the text)."""
        self.media = media

    def _files(self, files: Any) -> list[Incoming]:
        """The shared files to download (`url_private`, with the bot token) and store (see
        take_files), when files are taken in."""
        if self.media is None:
            return []
        if not isinstance(files, list):
            raise Unreadable(f"files is {type(files).__name__}, not a list")
        incoming: list[Incoming] = []
        for f in files:
            if not isinstance(f, dict):
                continue
            url = f.get("url_private_download") or f.get("url_private")
            if not url:
                continue
            media_type = text(f.get("mimetype"), "mimetype")
            size, duration = f.get("size"), f.get("duration_ms")
            incoming.append(
                Incoming(
                    name=text(f.get("name") or f.get("title"), "file name") or "file",
                    media_type=media_type,
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    fetch=functools.partial(self._download, ident(url, "file url")),
                    voice=media_type_of(media_type).startswith("audio/"),  # a clip made in Slack
                    duration=duration / 1000 if isinstance(duration, int) else None,
                )
            )
        return incoming

    async def _download(self, url: str, into: Download) -> None:
        """A private file, with the bot token: only ever sent to Slack's own hosts (or the
        configured API's, for a test server). Streamed, stopped at the limit."""
        host = urlsplit(url).hostname or ""
        if not (host == urlsplit(self.client.base_url).hostname or host.endswith(".slack.com")):
            raise PermissionError(f"not a Slack file address: {host}")
        headers = {"Authorization": f"Bearer {self.client.token}"}
        timeout = aiohttp.ClientTimeout(total=120)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            response.raise_for_status()
            if response.content_type == "text/html":  # Slack's sign-in page: no access
                raise PermissionError("Slack answered with a sign-in page")
            into.declared(response.content_length)
            await into.write_all(response.content.iter_chunked(CHUNK))

    async def _on_button(self, body: dict[str, Any], handler: InboundHandler) -> None:
        """A pressed answer button: an ordinary message with its text, from whoever pressed
        (one that cannot be read is recorded as failed)."""
        try:
            inbound = self._pressed(body)
        except Exception as exc:
            refuse(self, exc, kind="block_actions")
            return
        if inbound is not None:
            await handler(inbound)

    def _pressed(self, body: dict[str, Any]) -> Inbound | None:
        action = (body.get("actions") or [{}])[0]
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        if not user or not channel or not action.get("value"):
            return None
        channel = ident(channel, "channel")
        container = body.get("container") or {}
        thread = container.get("thread_ts")
        pressed = ident(action.get("action_ts") or body.get("trigger_id"), "action_ts")
        return checked(
            Inbound(
                transport=self.name,
                chat_id=channel,
                sender_id=ident(user, "user"),
                message_id=f"button:{channel}:{pressed}",
                text=text(action["value"], "value"),
                is_group=not channel.startswith("D"),
                mentioned=True,
                thread_id=ident(thread, "thread_ts") if thread else None,
            )
        )

    async def send(self, message: Outbound) -> None:
        if message.attachment is not None:
            data = await file_bytes(self.media, message)
            if not isinstance(data, Outbound):
                return await self._send_file(message, data)
            message = data
        text = to_mrkdwn(message.text)
        blocks: list[dict[str, Any]] | None = None
        if message.buttons:  # Block Kit: the text, then one button per answer
            blocks = [
                {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": f"{ANSWER_ACTION}{i}",
                            "text": {"type": "plain_text", "text": label[:75]},
                            "value": label[:2000],
                        }
                        for i, label in enumerate(message.buttons)
                    ],
                },
            ]
        if message.thread_id:
            # Before posting: a reply in the thread may arrive before chat.postMessage returns.
            self._remember_thread(message.chat_id, message.thread_id)
        if message.replaces is not None and await self._update(message, text, blocks):
            return
        try:
            await self.client.chat_postMessage(
                channel=message.chat_id, text=text, thread_ts=message.thread_id, blocks=blocks
            )
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "chat.postMessage", exc) from exc

    async def _update(self, message: Outbound, text: str, blocks: Any) -> bool:
        """The streamed preview `message.replaces` updated into the final text; False when
        it is gone (deleted) and the text must be posted anew."""
        assert message.replaces is not None
        await self._stop_stream(message.chat_id, message.replaces)
        try:
            await self.client.chat_update(
                channel=message.chat_id, ts=message.replaces, text=text, blocks=blocks
            )
        except SlackApiError as exc:
            if exc.response.get("error") in ("message_not_found", "cant_update_message"):
                return False
            raise self._failed("slack.bot_token", "chat.update", exc) from exc
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "chat.update", exc) from exc
        return True

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: posted, then updated in place (see rousseau.streaming);
        in a thread with native streams, started and appended to, as long as the text only
        grows (a status line or a new step ends the stream: updated in place from then on)."""
        try:
            if self.native_streams and thread_id:
                streamed = await self._stream(chat_id, thread_id, text, message_id)
                if streamed is not None:
                    return streamed
            shown = to_mrkdwn(text)
            if message_id is None:
                if thread_id:
                    self._remember_thread(chat_id, thread_id)
                posted = await self.client.chat_postMessage(
                    channel=chat_id, text=shown, thread_ts=thread_id
                )
                return str(posted["ts"])
            await self.client.chat_update(channel=chat_id, ts=message_id, text=shown)
            return message_id
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise Throttled(float(exc.response.headers.get("Retry-After", 1))) from exc
            raise self._failed("slack.bot_token", "a preview", exc) from exc
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "a preview", exc) from exc

    async def _stream(
        self, chat_id: str, thread_id: str, text: str, message_id: str | None
    ) -> str | None:
        """The message id once shown through a native stream; None where the text must be
        shown by an edit instead (no stream to append to, or the text does not continue it)."""
        if message_id is None:
            try:
                started = await self.client.chat_startStream(
                    channel=chat_id, thread_ts=thread_id, markdown_text=text
                )
            except SlackApiError as exc:
                if exc.response.status_code == 429:
                    raise
                # A workspace without AI streaming (or an older Slack): edits from now on.
                self.native_streams = False
                log.warning("slack.native_streams_refused", error=exc.response.get("error"))
                return None
            ts = str(started["ts"])
            self._streams[ts] = text
            while len(self._streams) > STREAMS_KEPT:
                self._streams.popitem(last=False)
            return ts
        written = self._streams.get(message_id)
        if written is None:
            return None  # a stream this process did not start (before a restart), or ended
        if not text.startswith(written):
            await self._stop_stream(chat_id, message_id)
            return None
        if len(text) > len(written):
            await self.client.chat_appendStream(
                channel=chat_id, ts=message_id, markdown_text=text[len(written) :]
            )
            self._streams[message_id] = text
        return message_id

    async def _stop_stream(self, chat_id: str, ts: str) -> None:
        """End a native stream (before its message is updated); nothing for another message."""
        if self._streams.pop(ts, None) is None:
            return
        try:
            await self.client.chat_stopStream(channel=chat_id, ts=ts)
        except SlackApiError as exc:  # it may have ended on its own: the update still goes
            log.info("slack.stop_stream_failed", error=exc.response.get("error"))

    async def _send_file(self, message: Outbound, data: bytes) -> None:
        """Uploaded to the chat (Slack's external upload: an upload URL, the bytes, then
        the completion that shares it), the text as its comment; Slack shows an image inline."""
        attachment = message.attachment
        assert attachment is not None
        name = attachment.name or "file"
        if message.thread_id:
            self._remember_thread(message.chat_id, message.thread_id)
        try:
            await self.client.files_upload_v2(
                channel=message.chat_id,
                file=data,
                filename=name,
                title=name,
                initial_comment=to_mrkdwn(message.text) or None,
                thread_ts=message.thread_id,
            )
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "files.upload", exc) from exc

    def _remember_thread(self, channel: str, thread: str) -> None:
        self._threads[(channel, thread)] = None
        self._threads.move_to_end((channel, thread))
        while len(self._threads) > 10_000:
            self._threads.popitem(last=False)

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        """Slack offers bots no typing indicator over Socket Mode."""

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """The reaction named `emoji` (`eyes`, with or without colons) on the sender's
        message."""
        channel, _, ts = inbound.message_id.partition(":")
        if channel == "button" or not ts:
            return
        try:
            await self.client.reactions_add(channel=channel, timestamp=ts, name=emoji.strip(":"))
        except SlackApiError as exc:
            if exc.response.get("error") == "already_reacted":  # a redelivered event
                return
            raise self._failed("slack.bot_token", "reactions.add", exc) from exc
        except _FAILURES as exc:
            raise self._failed("slack.bot_token", "reactions.add", exc) from exc

    async def aclose(self) -> None:
        for client in (self.client, self._socket_client):
            session = getattr(client, "session", None)
            if session is not None and not session.closed:
                await session.close()


_CODE = re.compile(r"(```.*?```|`[^`\n]+`)", re.S)
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_ITALIC = re.compile(r"(?<![*\w])\*(?![*\s])([^*\n]+?)(?<![\s*])\*(?![*\w])")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")


def to_mrkdwn(text: str) -> str:
    """The model's Markdown in Slack's mrkdwn: bold, italics, links, headings; code untouched.

    Written by hand: the few rules Slack needs are shorter than a dependency.
    """
    out: list[str] = []
    for i, part in enumerate(_CODE.split(text)):
        if i % 2:
            out.append(part)
            continue
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        part = _ITALIC.sub(r"_\1_", part)
        part = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", part)
        part = _HEADING.sub(r"*\1*", part)
        part = _STRIKE.sub(r"~\1~", part)
        part = _LINK.sub(r"<\2|\1>", part)
        out.append(part)
    return "".join(out)
