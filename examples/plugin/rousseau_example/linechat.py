"""The linechat transport: a chat server speaking one JSON object per line over TCP.

The client says `{"type": "auth", "token": ...}`; the server answers `{"type": "ready",
"user": BOT}` (or `{"type": "error", "code": "auth"}`) and then sends each message as
`{"type": "message", "id", "chat", "sender", "text", "group", "mentioned"}`. The client
sends `{"type": "send", "ref", "chat", "text"}`, acknowledged by `{"type": "sent", "ref"}`,
and `{"type": "typing", "chat"}`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import SecretStr

from rousseau.agent import TransportAuthError, TransportError
from rousseau.config.transports import TransportConfig
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.plugins import TransportPlugin

SEND_TIMEOUT = 10.0


class LinechatConfig(TransportConfig):
    address: str = "127.0.0.1:7000"
    """The chat server, host:port."""
    token: SecretStr
    """The bot's token on that server."""
    max_length: int = 2000
    """The server's longest message, in characters."""


class LinechatTransport:
    name = "linechat"
    measure = staticmethod(len)

    def __init__(self, host: str, port: int, token: str, *, max_length: int = 2000) -> None:
        self.host, self.port, self.token = host, port, token
        self.max_length = max_length
        self.user = ""
        self._stream: ByteStream | None = None
        self._stopped = anyio.Event()
        self._refs = itertools.count(1)
        self._acks: dict[int, anyio.Event] = {}

    @property
    def connected(self) -> bool:
        return self._stream is not None

    def bind_state(self, state: KeyValue) -> None:
        pass  # nothing to keep: the server never sends a message twice on purpose

    async def _connect(self) -> tuple[ByteStream, BufferedByteReceiveStream]:
        try:
            stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as exc:
            raise TransportError(f"linechat: cannot reach {self.host}:{self.port}: {exc}") from exc
        reader = BufferedByteReceiveStream(stream)
        await stream.send(_line({"type": "auth", "token": self.token}))
        answer = await _read(reader)
        if answer.get("type") != "ready":
            await stream.aclose()
            if answer.get("code") == "auth":
                raise TransportAuthError("linechat.token: the server refused it")
            raise TransportError(f"linechat: unexpected answer {answer.get('type')!r}")
        self.user = str(answer.get("user", ""))
        return stream, reader

    async def check(self) -> str:
        stream, _ = await self._connect()
        await stream.aclose()
        return self.user

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        stream, reader = await self._connect()
        self._stopped = anyio.Event()
        self._stream = stream
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:

                async def stop_when_asked() -> None:
                    await self._stopped.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_when_asked)
                while True:
                    event = await _read(reader)
                    if event.get("type") == "sent":
                        if (ack := self._acks.get(event.get("ref", -1))) is not None:
                            ack.set()
                    elif event.get("type") == "message":
                        inbound = self._inbound(event)
                        if inbound is not None:
                            await handler(inbound)
        finally:
            self._stream = None
            for ack in self._acks.values():
                ack.set()  # a send waiting on this connection fails and is retried
            await stream.aclose()

    def _inbound(self, event: dict[str, Any]) -> Inbound | None:
        """A message event as an Inbound; None for the bot's own or a malformed one."""
        fields = ("id", "chat", "sender", "text")
        if not all(isinstance(event.get(f), str) for f in fields):
            return None  # malformed: skipped, the connection goes on
        if event["sender"] == self.user:
            return None
        return Inbound(
            transport=self.name,
            chat_id=event["chat"],
            sender_id=event["sender"],
            message_id=event["id"],
            text=event["text"],
            is_group=bool(event.get("group")),
            mentioned=bool(event.get("mentioned")),
        )

    async def stop(self) -> None:
        self._stopped.set()

    async def send(self, message: Outbound) -> None:
        stream = self._stream
        if stream is None:
            raise TransportError("linechat: not connected")
        ref = next(self._refs)
        ack = self._acks[ref] = anyio.Event()
        try:
            await stream.send(
                _line({"type": "send", "ref": ref, "chat": message.chat_id, "text": message.text})
            )
            with anyio.move_on_after(SEND_TIMEOUT):
                await ack.wait()
            if self._stream is not stream or not ack.is_set():
                raise TransportError("linechat: the server did not confirm the message")
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise TransportError(f"linechat: send failed: {exc}") from exc
        finally:
            del self._acks[ref]

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        if self._stream is not None:
            await self._stream.send(_line({"type": "typing", "chat": chat_id}))

    async def aclose(self) -> None:
        self._stopped.set()


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


async def _read(reader: BufferedByteReceiveStream) -> dict[str, Any]:
    """The next object the server sends; a line that is not one is skipped."""
    while True:
        try:
            raw = await reader.receive_until(b"\n", 1_000_000)
        except (anyio.EndOfStream, anyio.IncompleteRead, OSError) as exc:
            raise TransportError("linechat: the server closed the connection") from exc
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj


def build(section: LinechatConfig) -> LinechatTransport:
    host, _, port = section.address.rpartition(":")
    return LinechatTransport(
        host, int(port), section.token.get_secret_value(), max_length=section.max_length
    )


plugin = TransportPlugin(config=LinechatConfig, build=build)
