"""XMPP through slixmpp: direct chats answered, and room (MUC) lines when they name the bot's
nick; a receipt (XEP-0184) for a message that asks for one, sent once the message is taken;
"composing" (XEP-0085) while a direct answer is written. A dropped stream ends `run` with a
TransportError (the supervisor reconnects with backoff, and the rooms are joined again);
messages sent to the bot while it was away are kept by the server and answered when it is
back. OMEMO is not supported: an encrypted message arrives as its fallback text.

A direct chat's sender is their bare address (you@example.org). In a room, a sender is their
bare address where the room shows it (a non-anonymous room, or one the bot moderates), else
room/nick, which no allowlist entry matches: a nick anyone may take, an address only its owner.
"""

from __future__ import annotations

import itertools
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.mention import names
from rousseau.transports.unreadable import Unreadable, checked, refuse

try:
    import slixmpp
    from slixmpp.exceptions import PresenceError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the xmpp transport", "xmpp") from exc

log = structlog.get_logger("rousseau.xmpp")

MAX_LENGTH = 10_000
"""Characters of one message: servers take far more (Prosody 256 KiB a stanza), but clients
show a long one badly."""
CONNECT_TIMEOUT = 30.0
JOIN_TIMEOUT = 20.0
QUEUE = 1000
"""Messages taken in and not yet handed over, at most (a flood past it is dropped, logged)."""
RESOURCE = "rousseau"
PLUGINS = ("xep_0030", "xep_0045", "xep_0085", "xep_0184", "xep_0199", "xep_0203")
RECEIPT_REQUEST = "{urn:xmpp:receipts}request"
DELAY = "{urn:xmpp:delay}delay"


@dataclass(frozen=True)
class _Taken:
    inbound: Inbound
    receipt: Any | None
    """The message, where its sender asked for a receipt."""


class XMPPTransport:
    name = "xmpp"
    max_length = MAX_LENGTH
    measure = staticmethod(len)

    def __init__(
        self,
        jid: str,
        password: str,
        *,
        server: str | None = None,
        tls: str = "starttls",
        tls_verify: bool = True,
        rooms: Iterable[str] = (),
        nick: str = "rousseau",
        keepalive: float = 60.0,
    ) -> None:
        self.jid, self.password = jid if "/" in jid else f"{jid}/{RESOURCE}", password
        self.address = _address(server, tls)
        self.tls, self.tls_verify = tls, tls_verify
        self.rooms = [room.lower() for room in rooms]
        self.nick, self.keepalive = nick, keepalive
        self.state: KeyValue = MemoryKeyValue()
        self._client: Any = None
        self._ready = anyio.Event()
        self._gone = anyio.Event()
        self._settled = anyio.Event()
        """Set once a log-in has succeeded or failed."""
        self._stop = anyio.Event()
        self._refused = ""
        self._failure = ""
        self._joined: set[str] = set()
        self._ids = itertools.count(1)
        self._epoch = f"{int(time.time())}"
        self._inbox: MemoryObjectSendStream[_Taken] | None = None
        """Where messages taken in wait for the handler, in order (one per run)."""

    @property
    def connected(self) -> bool:
        return self._client is not None and self._ready.is_set() and not self._gone.is_set()

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def _client_for(self) -> Any:
        options: dict[str, Any] = {}
        if not self.tls_verify:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            options["ssl_context"] = context
        # Without TLS, SCRAM only: it never sends the password itself (PLAIN stays refused).
        mechanisms = {"unencrypted_scram": self.tls == "off"}
        client = slixmpp.ClientXMPP(
            self.jid, self.password, plugin_config={"feature_mechanisms": mechanisms}, **options
        )
        client.enable_starttls = self.tls == "starttls"
        client.enable_direct_tls = self.tls == "direct"
        client.enable_plaintext = self.tls == "off"
        for plugin in PLUGINS:
            client.register_plugin(plugin)
        client.plugin["xep_0184"].auto_ack = False  # acknowledged once taken, not on arrival
        client.plugin["xep_0199"].enable_keepalive(self.keepalive, self.keepalive / 2)
        client.add_event_handler("session_start", lambda _: self._on_session(client))
        client.add_event_handler("failed_auth", self._on_refused)
        client.add_event_handler("no_auth", self._on_no_login)
        client.add_event_handler("connection_failed", self._on_failed)
        client.add_event_handler("disconnected", self._on_disconnected)
        client.add_event_handler("message", self._take)
        return client

    def _on_session(self, client: Any) -> None:
        client.send_presence()
        self._ready.set()
        self._settled.set()

    def _on_refused(self, _: Any) -> None:
        self._refused = "xmpp.password: the server refused the login"

    def _on_no_login(self, _: Any) -> None:
        self._refused = (
            "xmpp.tls: the server offers no login we may use on this stream (with starttls, "
            "it may offer no encryption)"
        )

    def _on_failed(self, error: Any) -> None:
        self._failure = str(error)
        self._on_disconnected(None)

    def _on_disconnected(self, _: Any) -> None:
        self._gone.set()
        self._settled.set()

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._inbox, taken = anyio.create_memory_object_stream[_Taken](QUEUE)
        self._stop = anyio.Event()
        client = self._client = self._client_for()
        try:
            await self._connect(client)
            log.info("xmpp.connected", jid=str(client.boundjid))
            async with anyio.create_task_group() as tg:

                async def hand_over() -> None:
                    async for item in taken:
                        await handler(item.inbound)
                        if item.receipt is not None and self.connected:
                            client.plugin["xep_0184"].ack(item.receipt)

                tg.start_soon(hand_over)
                await self._join_rooms(client)
                task_status.started()
                await self._gone.wait()
                tg.cancel_scope.cancel()
            if not self._stop.is_set():
                raise TransportError(f"xmpp: lost the connection to {self._where(client)}")
        finally:
            self._inbox.close()
            taken.close()
            with anyio.CancelScope(shield=True):
                await _close(client)
            self._client = None
            self._joined = set()

    def _where(self, client: Any) -> str:
        return f"{self.address[0]}:{self.address[1]}" if self.address else client.boundjid.domain

    async def _connect(self, client: Any) -> None:
        self._ready, self._gone, self._settled = anyio.Event(), anyio.Event(), anyio.Event()
        self._refused, self._failure = "", ""
        if self.address:
            client.connect(*self.address)
        else:
            client.connect()
        with anyio.move_on_after(CONNECT_TIMEOUT):
            await self._settled.wait()
        if self._refused:
            raise TransportAuthError(self._refused)
        if not self._ready.is_set():
            why = f": {self._failure}" if self._failure else ""
            raise TransportError(f"xmpp: cannot log in at {self._where(client)}{why}")

    async def _join_rooms(self, client: Any) -> None:
        """Into each room (no history: what was said while away is not for the bot); a room
        that will not have us is logged and left out, the others joined."""

        async def join(room: str) -> None:
            try:
                await client.plugin["xep_0045"].join_muc_wait(
                    slixmpp.JID(room), self.nick, maxstanzas=0, timeout=JOIN_TIMEOUT
                )
            except (PresenceError, TimeoutError) as exc:
                log.warning("xmpp.room_not_joined", room=room, error=str(exc) or "no answer")
            else:
                self._joined.add(room)

        async with anyio.create_task_group() as tg:
            for room in self.rooms:
                tg.start_soon(join, room)

    def _take(self, message: Any) -> None:
        """A message as the router takes it; the bot's own, a room's history, subjects,
        chat states and errors are not."""
        client, inbox = self._client, self._inbox
        kind, text = message["type"], message["body"]
        if client is None or inbox is None or not text or kind == "error":
            return
        sender = message["from"]
        if kind == "groupchat":
            room, nick = sender.bare.lower(), sender.resource
            if room not in self._joined or not nick or nick == self.nick:
                return
            if message.xml.find(DELAY) is not None:
                return  # history the room replays, said before the bot was there
            jid = client.plugin["xep_0045"].get_jid_property(sender.bare, nick, "jid")
            who = str(slixmpp.JID(jid).bare) if jid else f"{room}/{nick}"
            chat, private = room, False
        else:
            if sender.bare.lower() in self._joined or sender.bare == client.boundjid.bare:
                return  # a private line through a room (its sender hidden), or our own
            who = chat = str(sender.bare)
            private = True
        try:
            inbound = checked(
                Inbound(
                    transport=self.name,
                    chat_id=chat,
                    sender_id=who,
                    sender_name=sender.resource if not private else sender.user,
                    message_id=f"{sender}/{message['id']}" if message["id"] else self._local_id(),
                    text=text,
                    thread_id=message["thread"] or None,
                    is_group=not private,
                    mentioned=private or names(text, self.nick),
                )
            )
        except Unreadable as exc:
            refuse(self, exc, chat=chat, message=message["id"])
            return
        asks = message.xml.find(RECEIPT_REQUEST) is not None and bool(message["id"])
        try:
            inbox.send_nowait(_Taken(inbound, message if asks else None))
        except anyio.ClosedResourceError:
            return  # the stream is closing: the server keeps what it has not delivered
        except anyio.WouldBlock:
            log.error("xmpp.flooded", chat=chat, sender=who)

    def _local_id(self) -> str:
        return f"{self._epoch}-{next(self._ids)}"

    async def send(self, message: Outbound) -> None:
        client = self._client
        if client is None or not self.connected:
            raise TransportError("xmpp: not connected")
        text = message.text
        if message.attachment is not None:  # no file upload (XEP-0363) yet: say what it was
            text = "\n".join(t for t in (text, message.attachment.stand_in()) if t)
        room = message.chat_id.lower() in self._joined
        stanza = client.make_message(
            mto=message.chat_id, mbody=text, mtype="groupchat" if room else "chat"
        )
        if message.thread_id:
            stanza["thread"] = message.thread_id
        if not room:
            stanza["chat_state"] = "active"  # done writing
        try:
            stanza.send()
        except (OSError, ssl.SSLError, AttributeError) as exc:
            raise TransportError(f"xmpp: sending failed: {exc}") from exc

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        client = self._client
        if client is None or not self.connected or chat_id.lower() in self._joined:
            return  # a room sees no one's writing: it would be noise for everyone
        stanza = client.make_message(mto=chat_id, mtype="chat")
        stanza["chat_state"] = "composing"
        stanza.send()

    async def stop(self) -> None:
        self._stop.set()
        self._on_disconnected(None)

    async def check(self) -> str:
        client = self._client_for()
        try:
            await self._connect(client)
            return f"{client.boundjid.bare} on {self._where(client)}"
        finally:
            await _close(client)
            self._ready = anyio.Event()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await _close(client)


async def _close(client: Any) -> None:
    """The stream ended and every task slixmpp started for it done (it would retry a failed
    connection and send queued stanzas on its own otherwise)."""
    client.cancel_connection_attempt()
    if client.transport is not None:
        with anyio.move_on_after(3):
            await client.disconnect(wait=1)
    client.abort()
    filters = client._run_out_filters  # its send loop, started by connect, never ended
    if filters is not None and not filters.done():
        filters.cancel()


def _address(server: str | None, tls: str) -> tuple[str, int] | None:
    """Where to connect: `server` (host or host:port), or None to find it by DNS."""
    if not server:
        return None
    host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "")
    return host, int(port) if port else (5223 if tls == "direct" else 5222)
