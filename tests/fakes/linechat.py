"""A linechat server (the example plugin's platform): one JSON object per line over TCP on
127.0.0.1, as examples/plugin/rousseau_example/linechat.py describes it."""

from __future__ import annotations

import itertools
import json
import socket
import socketserver
import threading
from typing import Any

TOKEN = "linechat-token"
BOT = "bot"


class FakeLinechat:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[dict[str, Any]] = []
        self.typing: list[str] = []
        self.refused = 0
        self._client: socket.socket | None = None
        self._ids = itertools.count(1)
        self._connected = threading.Condition(self.lock)
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                fake._serve(self.request, self.rfile)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeLinechat:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def _serve(self, sock: socket.socket, rfile: Any) -> None:
        hello = json.loads(rfile.readline() or b"{}")
        if hello.get("type") != "auth" or hello.get("token") != TOKEN:
            with self.lock:
                self.refused += 1
            sock.sendall(_line({"type": "error", "code": "auth"}))
            return
        sock.sendall(_line({"type": "ready", "user": BOT}))
        with self.lock:
            self._client = sock
            self._connected.notify_all()
        for raw in rfile:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            with self.lock:
                if event.get("type") == "send":
                    self.sent.append(event)
                elif event.get("type") == "typing":
                    self.typing.append(event["chat"])
            if event.get("type") == "send":
                sock.sendall(_line({"type": "sent", "ref": event["ref"]}))
        with self.lock:
            if self._client is sock:
                self._client = None

    def deliver(self, event: dict[str, Any]) -> dict[str, Any]:
        """Send `event` (a message, its id made if missing) to the connected client, waiting
        up to 10 s for one."""
        event = {"type": "message", "id": f"m{next(self._ids)}", **event}
        with self._connected:
            if not self._connected.wait_for(lambda: self._client is not None, timeout=10):
                raise TimeoutError("no linechat client connected")
            assert self._client is not None
            self._client.sendall(_line(event))
        return event

    def send_raw(self, data: bytes) -> None:
        with self._connected:
            self._connected.wait_for(lambda: self._client is not None, timeout=10)
            assert self._client is not None
            self._client.sendall(data)

    def drop(self) -> None:
        """Cut the client's connection (it must come back by itself)."""
        with self.lock:
            client, self._client = self._client, None
        if client is not None:
            client.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.drop()
        self.server.shutdown()
        self.server.server_close()


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"
