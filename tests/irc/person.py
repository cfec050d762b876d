"""Someone on IRC for the tests: a plain client speaking the protocol over a socket (no
library: what it sends and reads is the wire itself), reading in a thread of its own."""

from __future__ import annotations

import socket
import threading
import time


class Person:
    def __init__(self, port: int, nick: str) -> None:
        self.nick = nick
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.lock = threading.Lock()
        self.lines: list[str] = []
        self.said: list[tuple[str, str, str]] = []
        """(from, target, text) of each PRIVMSG received."""
        self.welcomed = threading.Event()
        self.raw(f"NICK {nick}")
        self.raw(f"USER {nick} 0 * :{nick}")
        self.sock.settimeout(None)  # the reader waits as long as the server is quiet
        threading.Thread(target=self._read, daemon=True).start()
        if not self.welcomed.wait(10):
            raise TimeoutError(f"{nick} was not welcomed")

    def raw(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\r\n")

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
            *complete, buffer = buffer.split(b"\r\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                with self.lock:
                    self.lines.append(line)
                parts = line.split(" ", 3)
                if line.startswith("PING"):
                    self.raw("PONG " + line[5:])
                elif len(parts) > 1 and parts[1] == "001":
                    self.welcomed.set()
                elif len(parts) == 4 and parts[1] == "PRIVMSG":
                    sender = parts[0][1:].partition("!")[0]
                    with self.lock:
                        self.said.append((sender, parts[2], parts[3][1:]))

    def join(self, channel: str) -> None:
        self.raw(f"JOIN {channel}")
        self.wait_line(lambda line: f" JOIN {channel}" in line or f" JOIN :{channel}" in line)

    def say(self, target: str, text: str) -> None:
        self.raw(f"PRIVMSG {target} :{text}")

    def wait_line(self, check, seconds: float = 10) -> str:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                found = next((line for line in self.lines if check(line)), None)
            if found is not None:
                return found
            time.sleep(0.02)
        raise TimeoutError("no such line")

    def from_(self, nick: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(target, text) for sender, target, text in self.said if sender == nick]

    def close(self) -> None:
        try:
            self.raw("QUIT :bye")
        except OSError:
            pass
        self.sock.close()
