"""The router's part where several daemons share the state: a session's turn holds it, its
chat's earlier messages are answered first, and the work goes where a turn slot is free.

A message taken in while every turn slot of this daemon is busy is handed over: its claim is
dropped and the daemons are told. A router with a free slot pulls the waiting messages of
chats no other daemon works on: when told some wait, every third of the lease (what a dead
daemon left), and when a slot of its own frees while work may still wait (told so since it
last found less than it had room for). Its replies still go out where their transport is
connected (the outbox, and its courier on the daemon elected for the transport).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from dataclasses import replace
from typing import Protocol

import anyio
import structlog

from rousseau.agents import Routes
from rousseau.messages import Inbound
from rousseau.router.commands import Commands
from rousseau.router.sessions import Sessions
from rousseau.state.protocol import SharedState
from rousseau.transports.abilities import Abilities
from rousseau.transports.base import Transport

log = structlog.get_logger("rousseau.router")


class Answers(Protocol):
    """How the router answers one message: a command's reply, a refusal or a turn, where
    it was `retried` (or replayed); a `quiet` turn shows nothing before its answer."""

    async def __call__(self, inbound: Inbound, *, retried: bool, quiet: bool) -> None: ...


class Sharing:
    """Hands messages over, pulls them, and answers them holding their session."""

    def __init__(
        self,
        *,
        shared: SharedState,
        answer: Answers,
        sessions: Sessions,
        routes: Routes,
        commands: Commands,
        transports: Mapping[str, Transport],
        queues: Mapping[str, Sized],
        room: Callable[[], int],
        take: Callable[[list[Inbound]], None],
    ) -> None:
        self._shared = shared
        self._answer = answer
        self._sessions = sessions
        self._routes = routes
        self._commands = commands
        self._transports = transports
        self._queues = queues
        """The router's session queues: a message of one queued here is answered here."""
        self._room = room
        """How many more sessions could start a turn here now (none while stopping)."""
        self._take = take
        """Queues pulled messages for their turns."""
        self._stays = frozenset(
            name for name, t in transports.items() if Abilities.of(t).replies_stay
        )
        self._look = anyio.Event()
        self._look.set()  # what waits already, at start
        self._waits = True
        """Whether work may wait: told so since a pull last found less than it had room
        for (a daemon that frees a slot with nothing waiting asks nothing)."""

    def look(self) -> None:
        """Pull soon: messages may wait."""
        self._waits = True
        self._look.set()

    def freed(self) -> None:
        """A turn slot freed: pull soon if work may wait."""
        if self._waits:
            self._look.set()

    async def handed_over(self, inbound: Inbound) -> bool:
        """Hand over a message taken in here, unless it is answered here: a turn slot is
        free, its session is queued here, it is a command answered at once, or its reply
        must go out from here (a web page waits on this daemon). False: answer it here (it
        returns without waiting, so the router queues it before anything else runs)."""
        key = replace(inbound, agent=self._routes.agent_of(inbound)).session_key
        command = self._commands.named(inbound)
        if (
            self._room() > 0
            or key in self._queues
            or (command is not None and command.at_once)
            or inbound.transport in self._stays
        ):
            return False
        try:
            await self._shared.hand_over(inbound)
        except Exception as exc:  # still claimed here: answered here, never left behind
            log.warning("router.hand_over_failed", message=inbound.message_id, error=str(exc))
            return False
        return True

    async def run(self, parts: Callable[[str], None]) -> None:
        """Listen for news of work (`parts(transport)`: another daemon queued a reply of
        it) and pull waiting messages whenever there is room, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._shared.listen, self.look, parts)
            while True:
                await self._look.wait()
                self._look = anyio.Event()
                room = self._room()
                if room <= 0:
                    continue  # a freed slot looks again
                self._waits = False  # until told otherwise, while this pull runs too
                try:
                    pulled = await self._shared.pull(room)
                except Exception as exc:  # the database is away: the next look tries again
                    log.warning("router.pull_failed", error=str(exc))
                    self._waits = True
                    continue
                chats = {(i.transport, i.chat_id, i.thread_id) for i in pulled}
                if pulled:
                    log.info("router.pulled", messages=len(pulled), chats=len(chats))
                    self._take(pulled)
                if len(chats) >= room:  # more may wait
                    self.look()

    async def answer(self, inbound: Inbound, *, retried: bool) -> None:
        """Answer a message holding its session, after its chat's earlier messages still
        unanswered; not if another daemon answered it meanwhile. Where its transport is not
        connected to this daemon, nothing is shown before the answer (no typing, no
        preview): that goes through the connection, which is another daemon's."""
        transport = self._transports.get(inbound.transport)
        quiet = transport is None or not transport.connected
        async with self._shared.session_claimed(inbound.session_key):
            self._sessions.forget(inbound.session_key)  # another daemon may have added
            for left in await self._shared.earlier(inbound):  # the chat's order first
                log.info("router.replay", transport=left.transport, message=left.message_id)
                left = replace(left, agent=self._routes.agent_of(left))
                await self._answer(left, retried=True, quiet=quiet)
            if await self._shared.unanswered(inbound):
                await self._answer(inbound, retried=retried, quiet=quiet)
