"""Someone on XMPP for the tests: a plain client speaking the protocol over a socket (no
library: what it sends and reads is the wire itself, RFC 6120 with SASL PLAIN on the test
server's plain port), reading in a thread of its own."""

from __future__ import annotations

import base64
import itertools
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast
from xml.sax.saxutils import escape, quoteattr

from tests.xmpp.prosody import DOMAIN

CLIENT = "{jabber:client}"
SASL = "urn:ietf:params:xml:ns:xmpp-sasl"
BIND = "urn:ietf:params:xml:ns:xmpp-bind"
MUC = "http://jabber.org/protocol/muc"
RECEIPTS = "urn:xmpp:receipts"
CHAT_STATES = "http://jabber.org/protocol/chatstates"


@dataclass(frozen=True)
class Said:
    sender: str
    """The full address it came from (a room's messages: room@host/nick)."""
    kind: str
    body: str
    id: str


class Person:
    def __init__(self, port: int, user: str, password: str, resource: str = "test") -> None:
        self.jid = f"{user}@{DOMAIN}"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.lock = threading.Lock()
        self.stanzas: list[ET.Element] = []
        self._ids = itertools.count(1)
        self._buffer: list[ET.Element] = []
        self._parser = self._open()
        self._expect("features")
        token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
        self.raw(f"<auth xmlns='{SASL}' mechanism='PLAIN'>{token}</auth>")
        if not self._expect("success", "failure").tag.endswith("success"):
            raise PermissionError(f"{self.jid} was refused")
        self._parser = self._open()
        self._expect("features")
        self.raw(
            f"<iq type='set' id='bind'><bind xmlns='{BIND}'>"
            f"<resource>{resource}</resource></bind></iq>"
        )
        self._expect("iq")
        self.raw("<presence/>")
        self.sock.settimeout(None)  # the reader waits as long as the server is quiet
        threading.Thread(target=self._read, daemon=True).start()

    def _open(self) -> ET.XMLPullParser[ET.Element]:
        self.raw(
            f"<?xml version='1.0'?><stream:stream to='{DOMAIN}' xmlns='jabber:client' "
            "xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>"
        )
        parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
        self._depth = 0
        return parser

    def raw(self, xml: str) -> None:
        self.sock.sendall(xml.encode())

    def _stanzas(self) -> list[ET.Element] | None:
        """The stanzas one read of the socket completes (None once it is closed)."""
        try:
            data = self.sock.recv(65536)
        except OSError:
            return None
        if not data:
            return None
        self._parser.feed(data)
        done = []
        # Only "start" and "end" are asked for: each comes with its element.
        events = cast(Iterator[tuple[str, ET.Element]], self._parser.read_events())
        for event, element in events:
            self._depth += 1 if event == "start" else -1
            if event == "end" and self._depth == 1:
                done.append(element)
        return done

    def _expect(self, *names: str) -> ET.Element:
        """The next top-level element, during the log-in (before the reading thread)."""
        while not self._buffer:
            stanzas = self._stanzas()
            if stanzas is None:
                raise ConnectionError(f"{self.jid}: the server closed the stream")
            self._buffer = stanzas
        element = self._buffer.pop(0)
        if element.tag.rpartition("}")[2] not in names:
            raise ConnectionError(f"{self.jid}: expected {names}, got {ET.tostring(element)!r}")
        return element

    def _read(self) -> None:
        while (stanzas := self._stanzas()) is not None:
            for stanza in stanzas:
                with self.lock:
                    self.stanzas.append(stanza)

    def say(
        self, to: str, text: str, *, room: bool = False, receipt: bool = False, id: str = ""
    ) -> str:
        """A message to `to` (a person's address, or a room's); its id (given: a message sent
        again, as a client resends what the server did not acknowledge)."""
        id = id or f"m{next(self._ids)}-{time.monotonic_ns()}"
        kind = "groupchat" if room else "chat"
        ask = f"<request xmlns='{RECEIPTS}'/>" if receipt else ""
        self.raw(
            f"<message to={quoteattr(to)} type='{kind}' id='{id}'>"
            f"<body>{escape(text)}</body>{ask}</message>"
        )
        return id

    def join(self, room: str, nick: str) -> None:
        """Into `room` as `nick` (no history), once the room says we are in."""
        self.raw(
            f"<presence to={quoteattr(f'{room}/{nick}')}>"
            f"<x xmlns='{MUC}'><history maxstanzas='0'/></x></presence>"
        )
        self.wait(
            lambda s: (
                s.tag == f"{CLIENT}presence"
                and s.get("from") == f"{room}/{nick}"
                and s.get("type") != "error"
            )
        )

    def wait(self, check: Callable[[ET.Element], bool], seconds: float = 10) -> ET.Element:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                found = next((s for s in self.stanzas if check(s)), None)
            if found is not None:
                return found
            time.sleep(0.02)
        raise TimeoutError(f"{self.jid}: no such stanza")

    def messages(self, sender: Callable[[str], bool] = lambda _: True) -> list[Said]:
        """The messages with a body received, from senders `sender` accepts."""
        with self.lock:
            stanzas = list(self.stanzas)
        return [
            Said(s.get("from", ""), s.get("type", "normal"), body.text or "", s.get("id", ""))
            for s in stanzas
            if s.tag == f"{CLIENT}message"
            and (body := s.find(f"{CLIENT}body")) is not None
            and sender(s.get("from", ""))
        ]

    def receipts(self) -> list[str]:
        """The ids of the messages a receipt came back for."""
        with self.lock:
            stanzas = list(self.stanzas)
        return [
            received.get("id", "")
            for s in stanzas
            if (received := s.find(f"{{{RECEIPTS}}}received")) is not None
        ]

    def composing(self, sender: str) -> bool:
        """Whether `sender` said it is writing (a chat state)."""
        with self.lock:
            return any(
                s.get("from", "").startswith(sender)
                and s.find(f"{{{CHAT_STATES}}}composing") is not None
                for s in self.stanzas
            )

    def close(self) -> None:
        try:
            self.raw("<presence type='unavailable'/></stream:stream>")
        except OSError:
            pass
        self.sock.close()
