"""IRC through pydle (asyncio, TLS, SASL PLAIN, IRCv3 tags): private messages answered, and
channel lines when they name the bot's nick; replies cut under the 512-byte line limit on
word boundaries and sent at a flood-safe pace; NickServ identify where the server has no
SASL; a dropped link ends `run` with a TransportError (the supervisor reconnects with backoff,
and the channels are joined again).

A sender is their nick, or `account:NAME` when the server tags the message with the sender's
account (IRCv3 account-tag) and that entry is on the allowlist: a nick anyone may take, an
account only its owner.
"""

from __future__ import annotations

import itertools
import ssl
import time
from collections.abc import Iterable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.mention import names
from rousseau.transports.split import split_message
from rousseau.transports.unreadable import Unreadable, checked, refuse

try:
    import pydle
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the irc transport", "irc") from exc

log = structlog.get_logger("rousseau.irc")

LINE = 510
"""Bytes of one line as the server relays it, CR LF apart (RFC 1459's 512)."""
MAX_HOST = 63
"""The longest host a server puts in our prefix, when it has not told us ours."""
MAX_LENGTH = 350
"""Characters of one reply part (the router's split, 1,400 bytes at most); `send` cuts each
into lines under the byte limit."""
CONNECT_TIMEOUT = 30.0
QUEUE = 1000
"""Lines taken in and not yet handed over, at most (a flood past it is dropped, logged)."""


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


class _Client(pydle.Client):  # type: ignore[misc]  # pydle has no type hints
    """pydle's client, told to leave reconnecting to the supervisor, and to hand each
    message over in the order it came (its handlers run as tasks of their own)."""

    RECONNECT_ON_ERROR = False

    def __init__(self, transport: IRCTransport, nick: str, **options: Any) -> None:
        super().__init__(nick, **options)
        self.transport = transport

    async def _create_user(self, nickname: str) -> None:
        # pydle WHOISes every new nick inside the message handler when the server lacks
        # WHOX, so a stranger's first line would overtake nothing but arrive late and out
        # of order; what WHOIS would add (accounts) comes by account-tag instead.
        pydle.features.rfc1459.RFC1459Support._create_user(self, nickname)

    async def handle_forever(self) -> None:
        try:
            await super().handle_forever()
        except (OSError, ssl.SSLError):  # a reset link: pydle would not notice
            if self.connected:
                await self.disconnect(expected=False)

    async def on_connect(self) -> None:
        await super().on_connect()
        self.transport._on_connect()

    async def on_disconnect(self, expected: bool) -> None:
        self.transport._on_disconnect(expected)
        await super().on_disconnect(expected)

    async def on_raw_privmsg(self, message: Any) -> None:
        # Taken before pydle's own handler awaits anything: the order is kept.
        self.transport._take(message)
        await super().on_raw_privmsg(message)

    async def on_raw_903(self, message: Any) -> None:  # SASL succeeded
        self.transport._sasl_ok = True
        await super().on_raw_903(message)

    async def on_raw_904(self, message: Any) -> None:  # SASL failed
        self.transport._refused = "irc.password: the server refused the SASL login"
        await super().on_raw_904(message)

    async def on_raw_464(self, message: Any) -> None:  # ERR_PASSWDMISMATCH
        self.transport._refused = "irc.server_password: the server refused it"
        await super().on_raw_464(message)


class IRCTransport:
    name = "irc"
    max_length = MAX_LENGTH
    measure = staticmethod(len)

    def __init__(
        self,
        server: str,
        nick: str,
        *,
        port: int = 6697,
        tls: bool = True,
        tls_verify: bool = True,
        password: str | None = None,
        sasl_username: str | None = None,
        server_password: str | None = None,
        channels: Iterable[str] = (),
        allowlist: Iterable[str] = (),
        line_interval: float = 1.0,
        burst: int = 4,
    ) -> None:
        self.server, self.port, self.nick = server, port, nick
        self.tls, self.tls_verify = tls, tls_verify
        self.password, self.sasl_username = password, sasl_username
        self.server_password = server_password
        self.channels = list(channels)
        self.accounts = frozenset(a for a in allowlist if a.startswith("account:"))
        self.line_interval, self.burst = line_interval, burst
        self.state: KeyValue = MemoryKeyValue()
        self._client: _Client | None = None
        self._ready = anyio.Event()
        self._gone = anyio.Event()
        self._stop = anyio.Event()
        self._refused = ""
        self._ids = itertools.count(1)
        self._epoch = f"{int(time.time())}"
        self._inbox: MemoryObjectSendStream[Inbound] | None = None
        """Where lines taken in wait for the handler, in order (one per run)."""
        self._send_lock = anyio.Lock()
        self._tokens = float(burst)
        self._filled = time.monotonic()
        self._sasl_ok = False

    @property
    def connected(self) -> bool:
        return self._client is not None and self._ready.is_set() and not self._gone.is_set()

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def _client_for(self) -> _Client:
        sasl = {}
        if self.password:
            sasl = {
                "sasl_username": self.sasl_username or self.nick,
                "sasl_password": self.password,
                "sasl_mechanism": "PLAIN",
            }
        return _Client(self, self.nick, fallback_nicknames=[f"{self.nick}_"], **sasl)

    def _on_connect(self) -> None:
        self._ready.set()

    def _on_disconnect(self, expected: bool) -> None:
        self._gone.set()

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._ready, self._gone, self._stop = anyio.Event(), anyio.Event(), anyio.Event()
        self._refused, self._sasl_ok = "", False
        self._inbox, taken = anyio.create_memory_object_stream[Inbound](QUEUE)
        client = self._client = self._client_for()
        try:
            await self._connect(client)
            log.info("irc.connected", server=self.server, nick=client.nickname)
            task_status.started()
            async with anyio.create_task_group() as tg:

                async def hand_over() -> None:
                    async for inbound in taken:
                        await handler(inbound)

                tg.start_soon(hand_over)
                await self._identify(client)
                await self._gone.wait()
                tg.cancel_scope.cancel()
            if not self._stop.is_set():
                raise TransportError(f"irc: lost the connection to {self.server}")
        finally:
            self._ready = anyio.Event()
            self._inbox.close()
            taken.close()
            with anyio.CancelScope(shield=True):
                if client.connected:
                    await client.quit("bye")
            self._client = None

    async def _connect(self, client: _Client) -> None:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                await client.connect(
                    self.server,
                    self.port,
                    tls=self.tls,
                    tls_verify=self.tls_verify,
                    password=self.server_password,
                    channels=self.channels,
                )
                while not self._ready.is_set():
                    if self._gone.is_set():
                        break
                    await anyio.sleep(0.02)
        except TimeoutError as exc:
            raise TransportError(f"irc: {self.server}:{self.port} did not welcome us") from exc
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"irc: cannot reach {self.server}:{self.port}: {exc}") from exc
        if self._refused:
            raise TransportAuthError(self._refused)
        if not self._ready.is_set():
            raise TransportError(f"irc: {self.server} closed the connection while we registered")

    async def _identify(self, client: _Client) -> None:
        """NickServ IDENTIFY, where the password did not log in by SASL."""
        if self.password and not self._sasl_ok:
            await client.rawmsg("PRIVMSG", "NickServ", f"IDENTIFY {self.nick} {self.password}")

    def _take(self, message: Any) -> None:
        """A PRIVMSG as the router takes it; the bot's own, CTCP and NOTICEs are not."""
        client, inbox = self._client, self._inbox
        if client is None or inbox is None or len(message.params) < 2:
            return
        target, text = message.params[0], message.params[1]
        nick = str(message.source).partition("!")[0]
        if not nick or client.is_same_nick(nick, client.nickname) or text.startswith("\x01"):
            return
        private = client.is_same_nick(target, client.nickname)
        account = (getattr(message, "tags", None) or {}).get("account")
        sender = f"account:{account}" if f"account:{account}" in self.accounts else nick
        try:
            inbound = checked(
                Inbound(
                    transport=self.name,
                    chat_id=nick if private else target,
                    sender_id=sender,
                    sender_name=nick,
                    message_id=f"{self._epoch}-{next(self._ids)}",
                    text=text,
                    is_group=not private,
                    mentioned=private or names(text, client.nickname),
                )
            )
        except Unreadable as exc:  # pydle decodes as it can: a line may still not be kept
            refuse(self, exc, chat=target, sender=nick)
            return
        try:
            inbox.send_nowait(inbound)
        except anyio.ClosedResourceError:
            return  # the link is closing: IRC keeps nothing for us anyway
        except anyio.WouldBlock:
            log.error("irc.flooded", chat=inbound.chat_id, sender=nick)

    def _budget(self, target: str) -> int:
        """Bytes of text one PRIVMSG to `target` may carry, as the server relays it with
        our prefix (`:nick!user@host PRIVMSG target :`)."""
        client = self._client
        nick = client.nickname if client is not None else self.nick
        user = client.username if client is not None else self.nick
        prefix = f":{nick}!~{user}@{'x' * MAX_HOST} PRIVMSG {target} :"
        return LINE - utf8_len(prefix)

    async def send(self, message: Outbound) -> None:
        client = self._client
        if client is None or not self.connected:
            raise TransportError("irc: not connected")
        text = message.text if message.attachment is None else message.text or "[a file]"
        budget = self._budget(message.chat_id)
        lines = [
            part
            for line in text.splitlines()
            if line.strip()
            for part in split_message(line, budget, utf8_len)
        ]
        async with self._send_lock:  # one reply's lines together, in order
            for line in lines:
                await self._pace()
                try:
                    await client.rawmsg("PRIVMSG", message.chat_id, line)
                except (OSError, ssl.SSLError, AttributeError) as exc:
                    raise TransportError(f"irc: sending failed: {exc}") from exc

    async def _pace(self) -> None:
        """A token bucket: `burst` lines at once, then one each `line_interval` (servers
        cut off a client that floods them)."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._filled) / self.line_interval)
        self._filled = now
        if self._tokens < 1:
            await anyio.sleep((1 - self._tokens) * self.line_interval)
            self._tokens, self._filled = 1.0, time.monotonic()
        self._tokens -= 1

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        pass  # IRC has no typing notice most servers relay

    async def stop(self) -> None:
        self._stop.set()
        self._gone.set()

    async def check(self) -> str:
        client = self._client_for()
        self._ready, self._gone = anyio.Event(), anyio.Event()
        try:
            await self._connect(client)
            return f"{client.nickname} on {self.server}"
        finally:
            if client.connected:
                await client.quit("check")
            self._ready = anyio.Event()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and client.connected:
            await client.disconnect(expected=True)
