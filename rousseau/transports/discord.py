"""Discord through discord.py: DMs, mentions and replies in guilds, threads, typing.

Heartbeats, resume and reconnect are discord.py's own. `api_base` and `gateway_url` replace
discord.py's REST base and gateway (process-wide), for proxies and tests.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import Attachment, MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.transports.base import describe, file_bytes, take_files
from rousseau.transports.unreadable import Unreadable, checked, number, refuse, text

try:
    import aiohttp
    import discord
    import yarl
    from discord.gateway import DiscordWebSocket
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the discord transport", "discord") from exc

log = structlog.get_logger("rousseau.discord")
ANSWER_ID = "rousseau_answer:"

MAX_LENGTH = 2000
MAX_FILE_BYTES = 10 * 1024 * 1024
"""A bot's upload limit in a server without boosts."""
VOICE_MESSAGE = 1 << 13
"""The message flag of a voice message (IS_VOICE_MESSAGE)."""
_FAILURES = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError)
_CONNECTION_EVENTS = frozenset({"READY", "RESUMED"})
"""Gateway events about the connection itself, not what people send: one discord.py cannot
parse is a failed connection (the transport restarts), not a message to skip."""
_REJECTED_TOKEN = "set the bot token from the Developer Portal (Bot > Reset Token)"


class DiscordTransport:
    name = "discord"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)
    shares_connections = True
    """Several daemons may each hold a connection (see Transport)."""

    def __init__(
        self, token: str, *, api_base: str | None = None, gateway_url: str | None = None
    ) -> None:
        if api_base:
            discord.http.Route.BASE = api_base.rstrip("/")
        if gateway_url:
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
        self.token = token
        self._client: discord.Client | None = None
        self._ready = anyio.Event()
        self._stop = anyio.Event()
        self.media: MediaIntake | None = None
        self._in_order: dict[str, anyio.Lock] = {}
        """A lock per channel with a message being handed over (dropped once idle)."""

    @property
    def connected(self) -> bool:
        c = self._client
        return c is not None and c.is_ready() and not c.is_closed() and c.ws is not None

    def bind_state(self, state: KeyValue) -> None:
        """discord.py resumes sessions in memory; nothing is kept across restarts."""

    def _failed(self, doing: str, exc: BaseException) -> TransportError:
        """discord.py's error in rousseau's tree; a refused token is permanent."""
        if isinstance(exc, discord.LoginFailure) or (
            isinstance(exc, discord.HTTPException) and exc.status == 401
        ):
            return TransportAuthError(
                f"discord.token: the bot token was rejected (HTTP 401); {_REJECTED_TOKEN}"
            )
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return TransportAuthError(
                "discord.token: this bot may not read messages (gateway close 4014); enable "
                "Message Content Intent on the Developer Portal's Bot page"
            )
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            return TransportAuthError(
                f"discord.token: the gateway rejected the bot token (close 4004); {_REJECTED_TOKEN}"
            )
        return TransportError(f"discord: {doing} ({describe(exc, self.token)})")

    def _make_client(self, handler: InboundHandler) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True
        client = discord.Client(intents=intents)

        async def on_ready() -> None:
            log.info("discord.connected", bot=str(client.user))
            self._ready.set()

        async def on_message(message: discord.Message) -> None:
            read = self._read(client, message)
            if read is None:
                return
            inbound, files = read
            # discord.py runs each event in a task of its own: while one message's files
            # download, the next one of its channel waits, so they are handed over in order.
            key = inbound.chat_id
            lock = self._in_order.setdefault(key, anyio.Lock())
            try:
                async with lock:
                    inbound = await take_files(inbound, self.media, files, unavailable=_FAILURES)
                    await handler(inbound)
            finally:
                if not lock.locked() and not lock.statistics().tasks_waiting:
                    self._in_order.pop(key, None)

        async def on_interaction(interaction: discord.Interaction) -> None:
            try:
                inbound = self._pressed(interaction)
            except Exception as exc:
                refuse(self, exc, kind="INTERACTION_CREATE", message=interaction.id)
                return
            if inbound is not None:
                await handler(inbound)
                await interaction.response.defer()  # after persisting, as messages are

        client.event(on_ready)
        client.event(on_message)
        client.event(on_interaction)
        parsers = client._connection.parsers
        for kind, parse in list(parsers.items()):
            if kind not in _CONNECTION_EVENTS:
                parsers[kind] = functools.partial(self._parse, kind, parse)
        return client

    def _parse(self, kind: str, parse: Callable[[Any], None], data: Any) -> None:
        """One gateway event, parsed by discord.py (which dispatches what it makes of it).
        An event it cannot parse is recorded as failed and skipped: raised, it would end
        the whole connection, and the reconnect would wait longer each time."""
        try:
            parse(data)
        except Exception as exc:
            refuse(self, exc, kind=kind, message=_id_of(data))

    def _pressed(self, interaction: discord.Interaction) -> Inbound | None:
        """A pressed answer button: an ordinary message with its text, from whoever pressed."""
        data: dict[str, Any] = dict(interaction.data or {})
        custom_id = str(data.get("custom_id") or "")
        if interaction.type is not discord.InteractionType.component:
            return None
        if not custom_id.startswith(ANSWER_ID) or interaction.channel_id is None:
            return None
        return checked(
            Inbound(
                transport=self.name,
                chat_id=str(interaction.channel_id),
                sender_id=str(interaction.user.id),
                message_id=f"button:{interaction.id}",
                text=custom_id.removeprefix(ANSWER_ID),
                is_group=interaction.guild_id is not None,
                mentioned=True,
                sender_name=interaction.user.display_name,
            )
        )

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._ready, self._stop = anyio.Event(), anyio.Event()
        client = self._client = self._make_client(handler)
        failed: list[TransportError] = []
        try:
            try:
                await client.login(self.token)
            except _FAILURES as exc:
                raise self._failed("cannot reach the API", exc) from exc
            async with anyio.create_task_group() as tg:

                async def connect() -> None:
                    try:
                        await client.connect(reconnect=True)
                    except _FAILURES as exc:
                        failed.append(self._failed("the gateway connection failed", exc))
                    finally:  # the client gave up, failed or was closed
                        self._ready.set()
                        self._stop.set()

                tg.start_soon(connect)
                with anyio.move_on_after(60) as waiting:
                    await self._ready.wait()
                if not failed and not client.is_ready():
                    why = "was not ready in 60 s" if waiting.cancelled_caught else "closed early"
                    failed.append(TransportError(f"discord: the gateway {why}"))
                if not failed:
                    task_status.started()
                    await self._stop.wait()
                tg.cancel_scope.cancel()
            if failed:
                raise failed[0]
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    def _read(
        self, client: discord.Client, message: discord.Message
    ) -> tuple[Inbound, list[Incoming]] | None:
        """A message as the router takes it, checked, with the files it carries; None for
        one not to answer, or one that cannot be read (recorded as failed). Never raises."""
        try:
            inbound = self._normalise(client, message)
            return None if inbound is None else (checked(inbound), self._files(message))
        except Exception as exc:
            refuse(self, exc, kind="MESSAGE_CREATE", message=message.id)
            return None

    def _normalise(self, client: discord.Client, message: discord.Message) -> Inbound | None:
        me = client.user
        if me is None or message.author.bot or message.author.id == me.id:
            return None  # our own and other bots' messages
        if not isinstance(message.type.value, int):
            raise Unreadable(f"message type is {type(message.type.value).__name__}")
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return None
        is_dm = message.guild is None
        # `mentions` lists users only: @everyone and @here never count as naming the bot.
        mentioned = any(u.id == me.id for u in message.mentions)
        ref = message.reference.resolved if message.reference else None
        if isinstance(ref, discord.Message) and ref.author.id == me.id:
            mentioned = True
        said = re.sub(rf"<@!?{me.id}>", "", text(message.content, "content")).strip()
        if not said and not (self.media is not None and message.attachments):
            return None
        return Inbound(
            transport=self.name,
            chat_id=str(message.channel.id),  # a thread is a channel of its own: its own session
            sender_id=str(message.author.id),
            message_id=str(message.id),
            text=said,
            is_group=not is_dm,
            mentioned=mentioned,
            sender_name=message.author.display_name,
            at=message.created_at.timestamp(),
        )

    def bind_media(self, media: MediaIntake) -> None:
        """Take attachments in (unbound, only the text)."""
        self.media = media

    def _files(self, message: discord.Message) -> list[Incoming]:
        """The attachments to download from Discord's CDN and store (see take_files), when
        files are taken in (Unreadable if one is described with fields of the wrong type)."""
        if self.media is None:
            return []
        return [
            Incoming(
                name=text(a.filename, "file name"),
                media_type=text(a.content_type, "content type"),
                size=int(number(a.size, "file size")),
                fetch=functools.partial(_download, a.url),
                voice=a.is_voice_message(),
                duration=number(a.duration, "duration") if a.duration is not None else None,
            )
            for a in message.attachments
        ]

    async def _channel(self, chat_id: str) -> Any:
        assert self._client is not None, "the transport is not running"
        channel = self._client.get_channel(int(chat_id))
        if channel is None:
            try:
                channel = await self._client.fetch_channel(int(chat_id))
            except _FAILURES as exc:
                raise self._failed(f"cannot find channel {chat_id}", exc) from exc
        return channel

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: sent, then edited in place (see rousseau.streaming).
        discord.py waits out a 429 itself."""
        channel = await self._channel(chat_id)
        try:
            if message_id is None:
                sent = await channel.send(text, allowed_mentions=discord.AllowedMentions.none())
                return str(sent.id)
            await channel.get_partial_message(int(message_id)).edit(content=text)
            return message_id
        except _FAILURES as exc:
            raise self._failed("a preview failed", exc) from exc

    async def _edit(self, channel: Any, message: Outbound) -> bool:
        """The streamed preview `message.replaces` edited into the final text; False when it
        is gone (deleted) and the text must be sent anew."""
        assert message.replaces is not None
        try:
            await channel.get_partial_message(int(message.replaces)).edit(content=message.text)
        except discord.NotFound:
            return False
        except _FAILURES as exc:
            raise self._failed("editing failed", exc) from exc
        return True

    async def send(self, message: Outbound) -> None:
        channel = await self._channel(message.chat_id)
        if message.replaces is not None and await self._edit(channel, message):
            return
        reference = None
        if message.reply_to and getattr(channel, "guild", None) is not None:
            reference = discord.MessageReference(
                message_id=int(message.reply_to),
                channel_id=int(message.chat_id),
                fail_if_not_exists=False,
            )
        view = discord.utils.MISSING
        if message.buttons:  # the answers as buttons; a press comes back as an interaction
            view = discord.ui.View(timeout=None)
            for label in message.buttons:
                view.add_item(
                    discord.ui.Button(label=label[:80], custom_id=f"{ANSWER_ID}{label}"[:100])
                )
        file = discord.utils.MISSING
        if (attachment := message.attachment) is not None:  # shown inline if an image
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                message = data
            elif attachment.voice and not message.text:
                await self._send_voice(message.chat_id, attachment, data)
                return
            else:
                file = discord.File(io.BytesIO(data), filename=attachment.name or "file")
        try:
            await channel.send(
                message.text or None,
                reference=reference,
                mention_author=False,
                allowed_mentions=discord.AllowedMentions.none(),
                view=view,
                file=file,
            )
        except _FAILURES as exc:
            raise self._failed("sending failed", exc) from exc

    async def _send_voice(self, channel_id: str, attachment: Attachment, data: bytes) -> None:
        """A voice message: the voice flag (8192) and an OGG/Opus attachment with its length
        and waveform. By hand, on Discord's documented REST API: discord.py 2.7 cannot set
        the flag nor those fields (its pull request 10230 is open)."""
        waveform = base64.b64encode(attachment.waveform or bytes(64)).decode()
        payload = {
            "flags": VOICE_MESSAGE,
            "attachments": [
                {
                    "id": "0",
                    "filename": "voice-message.ogg",
                    "duration_secs": round(attachment.duration, 2),
                    "waveform": waveform,
                }
            ],
        }
        url = f"{discord.http.Route.BASE}/channels/{channel_id}/messages"
        agent = f"DiscordBot (https://github.com/Rapptz/discord.py, {discord.__version__})"
        headers = {"Authorization": f"Bot {self.token}", "User-Agent": agent}
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(3):
                form = aiohttp.FormData()
                form.add_field("payload_json", json.dumps(payload), content_type="application/json")
                form.add_field(
                    "files[0]", data, filename="voice-message.ogg", content_type="audio/ogg"
                )
                try:
                    async with session.post(url, data=form, headers=headers) as response:
                        if response.status == 429:  # rate limited: wait as told, then again
                            await anyio.sleep(float(response.headers.get("Retry-After", "1")))
                            continue
                        if response.status >= 400:
                            said = (await response.text())[:200]
                            raise TransportError(
                                f"discord: a voice message was refused ({response.status}: {said})"
                            )
                        return
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise self._failed("sending a voice message failed", exc) from exc
        raise TransportError("discord: a voice message stayed rate limited")

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        channel = await self._channel(chat_id)
        try:
            await channel.typing()
        except _FAILURES as exc:
            raise self._failed("typing failed", exc) from exc

    async def react(self, inbound: Inbound, emoji: str) -> None:
        """`emoji` on the sender's message."""
        if not inbound.message_id.isdigit():
            return  # a button press: no message of theirs
        channel = await self._channel(inbound.chat_id)
        try:
            await channel.get_partial_message(int(inbound.message_id)).add_reaction(emoji)
        except _FAILURES as exc:
            raise self._failed("a reaction failed", exc) from exc

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        """One harmless call (the bot's own user) proving the token works."""
        client = discord.Client(intents=discord.Intents.none())
        try:
            await client.login(self.token)
            return f"@{client.user}"
        except _FAILURES as exc:
            raise self._failed("cannot reach the API", exc) from exc
        finally:
            await client.close()

    async def application_id(self) -> int:
        """The bot's application, the id an invitation names."""
        client = discord.Client(intents=discord.Intents.none())
        try:
            await client.login(self.token)
            assert client.user is not None
            return client.application_id or client.user.id
        except _FAILURES as exc:
            raise self._failed("cannot reach the API", exc) from exc
        finally:
            await client.close()

    async def aclose(self) -> None:
        if self._client is not None and not self._client.is_closed():
            await self._client.close()


def _id_of(data: Any) -> str | None:
    """The id a gateway event's data carries, to name it in a log line (if it has one)."""
    found = data.get("id") if isinstance(data, dict) else None
    return str(found)[:40] if isinstance(found, str | int) else None


async def _download(url: str, into: Download) -> None:
    """An attachment from Discord's CDN (a signed address, no token sent), a chunk at a
    time: discord.py's Attachment.read gives the whole file at once."""
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url) as response,
    ):
        response.raise_for_status()
        into.declared(response.content_length)
        await into.write_all(response.content.iter_chunked(CHUNK))


def invite_url(application_id: int) -> str:
    """The address that adds the bot to a server with what it uses: reading and sending
    messages (in threads too), their history, files, links, reactions."""
    permissions = discord.Permissions(
        view_channel=True,
        send_messages=True,
        send_messages_in_threads=True,
        read_message_history=True,
        attach_files=True,
        embed_links=True,
        add_reactions=True,
    )
    return discord.utils.oauth_url(application_id, permissions=permissions, scopes=("bot",))
