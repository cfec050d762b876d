"""A transport of your own: the Transport protocol, run by the daemon like any platform.

This one takes its messages from a list and prints the replies; a real adapter would read a
platform's events in `run` and call its API in `send`, and raise `TransportError` when the
platform fails (the daemon retries) or `TransportAuthError` when it refuses the credentials
(the daemon stops this transport and shows the message).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.log import configure_logging
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.router import ChatPolicy


class ListTransport:
    name = "list"
    max_length = 4096  # the platform's message limit; longer replies arrive split
    measure = staticmethod(len)
    connected: bool

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        self.replies: list[Outbound] = []
        self.answered = anyio.Event()
        self.connected = False
        self._stop = anyio.Event()

    def bind_state(self, state: KeyValue) -> None:
        pass  # where a platform's sync position or login would be kept across restarts

    async def check(self) -> str:
        return "a list"  # `rousseau doctor`: one harmless call proving the credentials

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.connected = True
        task_status.started()
        for number, text in enumerate(self.messages, 1):
            # the platform's own message id makes redeliveries harmless
            inbound = Inbound(
                transport=self.name, chat_id="me", sender_id="me", message_id=str(number), text=text
            )
            await handler(inbound)  # returns once the message is safely stored
        await self._stop.wait()
        self.connected = False

    async def stop(self) -> None:
        self._stop.set()

    async def send(self, message: Outbound) -> None:
        print(f"-> {message.chat_id}: {message.text}")  # raise here and the outbox retries
        self.replies.append(message)
        if len(self.replies) == len(self.messages):
            self.answered.set()

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        pass  # no typing indicator on this platform

    async def aclose(self) -> None:
        pass  # close HTTP sessions and clients here


async def main() -> None:
    configure_logging("warning")  # the daemon's log lines would drown the example's output
    folder = Path(tempfile.mkdtemp())
    config = load_config(None, {"HOME": str(folder), "ROUSSEAU_STATE_PATH": str(folder / "s.db")})
    transport = ListTransport(["hello", "how are you?"])
    daemon = Daemon(
        config,
        transports={"list": transport},
        chat_policies={"list": ChatPolicy(allowlist=frozenset({"me"}))},
        provider=FunctionProvider(
            lambda request: text_reply(f"you said: {request.messages[-1].text}")
        ),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(30):
            await transport.answered.wait()
        daemon.stop()


if __name__ == "__main__":
    anyio.run(main)
