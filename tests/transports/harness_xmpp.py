"""The XMPP adapter's harness: the real adapter (slixmpp) against the real Prosody of the test
session, people speaking the protocol over plain sockets."""

from __future__ import annotations

import secrets
import time

from rousseau.transports.base import Transport
from rousseau.transports.xmpp import MAX_LENGTH, RESOURCE, XMPPTransport
from tests.transports.conformance import Delivered
from tests.xmpp.person import CLIENT, Person
from tests.xmpp.prosody import ROOMS, Prosody

NICK = "rbot"
PASSWORD = "harness-password"


class XMPPHarness:
    name = "xmpp"
    measure = staticmethod(len)
    limit = MAX_LENGTH

    def __init__(self, server: Prosody) -> None:
        self.server = server
        tag = secrets.token_hex(3)
        self.bot_user = f"bot{tag}"
        self.bot = server.register(self.bot_user, PASSWORD)
        self.owner = server.register(f"alice{tag}", PASSWORD)
        self.stranger = server.register(f"eve{tag}", PASSWORD)
        self.dm_chat = self.owner
        self.group_chat = f"room{tag}@{ROOMS}"
        self.alice = Person(server.port, self.owner.partition("@")[0], PASSWORD)
        self.alice.join(self.group_chat, "alice")
        self.eve = Person(server.port, self.stranger.partition("@")[0], PASSWORD)
        self._last = ("", "")

    def transport(self) -> Transport:
        return XMPPTransport(
            self.bot,
            PASSWORD,
            server=f"127.0.0.1:{self.server.port}",
            tls_verify=False,  # the test server's certificate is self-signed
            rooms=[self.group_chat],
            nick=NICK,
        )

    def _entries(self) -> int:
        """How often alice has seen the bot come into the room."""
        with self.alice.lock:
            return sum(
                s.tag == f"{CLIENT}presence"
                and s.get("from") == f"{self.group_chat}/{NICK}"
                and s.get("type") != "unavailable"
                for s in self.alice.stanzas
            )

    def _bot_in_room(self) -> None:
        deadline = time.monotonic() + 15
        while not self._entries() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._entries():
            raise TimeoutError("the bot did not come into the room")

    def dm(self, text: str, *, sender: str | None = None) -> None:
        who = self.eve if sender == self.stranger else self.alice
        self._last = (self.bot, who.say(self.bot, text))
        self._last_text = text

    def group(self, text: str, *, mentioned: bool) -> None:
        self._bot_in_room()
        self.alice.say(self.group_chat, f"{NICK}: {text}" if mentioned else text, room=True)

    def mention_after(self, before: str, text: str) -> None:
        self._bot_in_room()
        self.alice.say(self.group_chat, f"{before}{NICK}: {text}", room=True)

    def own_message(self, text: str) -> None:
        """The bot's account, from another of its clients, writes to itself (a server echoes
        nothing else of a client's own: the room's echo of its lines comes on every reply)."""
        other = Person(self.server.port, self.bot_user, PASSWORD, resource="phone")
        other.say(self.bot, text)
        time.sleep(0.2)
        other.close()

    def redeliver_last(self) -> None:
        """The owner's client sends its last message again, under the same id."""
        to, id = self._last
        self.alice.say(to, self._last_text, id=id)

    def drop_connection(self) -> None:
        """Another client logs in as the bot under the bot's own resource: the server ends
        the bot's stream (a resource conflict). Returns once the bot is back in the room."""
        self._bot_in_room()
        entries = self._entries()
        interloper = Person(self.server.port, self.bot_user, PASSWORD, resource=RESOURCE)
        deadline = time.monotonic() + 20
        while self._entries() == entries and time.monotonic() < deadline:
            time.sleep(0.05)
        interloper.close()

    def typing_shown(self) -> bool:
        return self.alice.composing(self.bot)

    def delivered(self) -> list[Delivered]:
        """Each message the bot wrote to the owner, or in the room."""
        said = self.alice.messages(
            lambda sender: (
                sender.startswith(f"{self.bot}/") or sender == f"{self.group_chat}/{NICK}"
            )
        )
        return [
            Delivered(chat=self.group_chat if s.kind == "groupchat" else self.dm_chat, text=s.body)
            for s in said
        ]

    def close(self) -> None:
        self.alice.close()
        self.eve.close()
