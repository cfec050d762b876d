"""The IRC adapter's harness: the real adapter (pydle) against the real ngIRCd of the test
session, people speaking the protocol over plain sockets."""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.irc import MAX_LENGTH, IRCTransport
from tests.irc.ngircd import Ngircd
from tests.irc.person import Person
from tests.transports.conformance import Delivered


class IRCHarness:
    name = "irc"
    cannot: ClassVar[dict[str, str]] = {
        "redeliver_last": "an IRC server never delivers a line twice",
    }
    measure = staticmethod(len)
    limit = MAX_LENGTH
    long_parts = 340  # lines: the words take 40 or more, the code 302, then "Done."
    delivers_lines = True
    """Each Delivered is one IRC line (a reply part is sent as several)."""
    no_typing = "IRC has no typing notice"

    def __init__(self, server: Ngircd) -> None:
        self.server = server
        tag = secrets.token_hex(3)
        self.bot_nick = f"bot{tag}"
        self.owner = f"alice{tag}"
        self.stranger = f"eve{tag}"
        self.dm_chat = self.owner
        self.group_chat = "#room"
        self.alice = Person(server.port, self.owner)
        self.alice.join("#room")
        self.eve = Person(server.port, self.stranger)
        self._transport: IRCTransport | None = None

    def transport(self) -> Transport:
        self._transport = IRCTransport(
            "127.0.0.1",
            self.bot_nick,
            port=self.server.tls_port,
            tls=True,
            tls_verify=False,  # the test server's certificate is self-signed
            channels=["#room"],
            line_interval=0.01,
        )
        return self._transport

    def _bot_in_room(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.alice.lock:
                if any(
                    f":{self.bot_nick}!" in line and "JOIN" in line for line in self.alice.lines
                ):
                    return
            time.sleep(0.02)
        raise TimeoutError("the bot did not join #room")

    def dm(self, text: str, *, sender: str | None = None) -> None:
        who = self.eve if sender == self.stranger else self.alice
        who.say(self.bot_nick, text)

    def group(self, text: str, *, mentioned: bool) -> None:
        self._bot_in_room()
        self.alice.say("#room", f"{self.bot_nick}: {text}" if mentioned else text)

    def mention_after(self, before: str, text: str) -> None:
        self._bot_in_room()
        self.alice.say("#room", f"{before}{self.bot_nick}: {text}")

    def own_message(self, text: str) -> None:
        pass  # an IRC server never sends a client its own lines back (no echo-message)

    def redeliver_last(self) -> None:
        raise NotImplementedError

    def drop_connection(self) -> None:
        """An operator KILLs the bot's connection (the server closes it); returns once the
        bot is back in #room (IRC keeps nothing for a nick that is away)."""
        self._bot_in_room()
        joined = self._joins()
        oper = Person(self.server.port, f"op{secrets.token_hex(3)}")
        oper.raw("OPER tests tests-oper")
        oper.wait_line(lambda line: " 381 " in line)
        oper.raw(f"KILL {self.bot_nick} :dropped by the test")
        self.alice.wait_line(lambda line: f":{self.bot_nick}!" in line and " QUIT " in line)
        oper.close()
        deadline = time.monotonic() + 15
        while self._joins() == joined and time.monotonic() < deadline:
            time.sleep(0.05)

    def _joins(self) -> int:
        with self.alice.lock:
            return sum(f":{self.bot_nick}!" in ln and " JOIN " in ln for ln in self.alice.lines)

    def delivered(self) -> list[Delivered]:
        """Each line the bot said to the owner or in #room."""
        return [
            Delivered(chat=self.dm_chat if target == self.owner else target, text=text)
            for target, text in self.alice.from_(self.bot_nick)
        ]

    def close(self) -> None:
        self.alice.close()
        self.eve.close()
