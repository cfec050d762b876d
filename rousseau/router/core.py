"""The Router: inbound -> dedupe -> policy -> session -> agent -> outbox (DESIGN.md section 1).

Turns of one session run one at a time in arrival order; turns of different sessions run
concurrently up to `max_concurrent_turns`. Every inbound is persisted before the platform is
acknowledged, and its reply is queued in the same transaction that marks it done.

This is the core: intake, the per-session queues and their workers, retries, delivery
wiring and the lifecycle. The stages it hands work to are the chat commands (commands.py),
the turn runner and its slots (turns.py), the sessions (sessions.py), the replies
(replies.py) and, where daemons share the state, the sharing of work (sharing.py), each
given what it needs when the Router is made.
"""

from __future__ import annotations

import functools
import secrets
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from rousseau.agent import Agent, Attachment
from rousseau.agents import Routes
from rousseau.approvals import ChatApprovals
from rousseau.backoff import backoff
from rousseau.costs import Meter
from rousseau.delivery import Courier
from rousseau.messages import Inbound, KeyValue
from rousseau.metrics import Metrics
from rousseau.policy import Admission, ChatPolicy, RateLimiter, Verdict
from rousseau.router.commands import Command, Commands, Context
from rousseau.router.intake import MAX_ATTEMPTS, IntakeFailures
from rousseau.router.replies import Replies
from rousseau.router.sessions import Sessions
from rousseau.router.settings import RouterSettings
from rousseau.router.sharing import Sharing
from rousseau.router.slots import TurnSlots
from rousseau.router.turns import Turns
from rousseau.router.voice import Speech
from rousseau.state import SessionStore, Store
from rousseau.state.daemon_state import DaemonState, TransportState
from rousseau.state.protocol import DaemonStore, ProfileStore, SharedState
from rousseau.state.store import StoreFullError
from rousseau.transports.base import Transport

log = structlog.get_logger("rousseau.router")

BROKEN_REPLY = (
    "Sorry, something went wrong on my side while handling that message, "
    "and trying again did not help. My owner can find it in the logs."
)
RETRY_CAP = 30.0


class ShuttingDown(Exception):
    """The daemon is stopping; the adapter must not acknowledge this message."""


@dataclass(slots=True)
class _Item:
    inbound: Inbound
    replay: bool
    attempts: int = 0  # failed tries that count towards giving up
    waits: int = 0  # tries that failed for want of disk space (never given up on)


@dataclass(kw_only=True)
class Router:
    """Takes each inbound message to its answer; made of its settings and collaborators,
    from which it makes its stages once."""

    agent: Agent
    """The default agent (the only one unless `agents:` is configured)."""
    store: SessionStore
    transports: dict[str, Transport]
    policies: dict[str, ChatPolicy]
    rate_limiter: RateLimiter
    settings: RouterSettings = field(default_factory=RouterSettings)
    metrics: Metrics = field(default_factory=Metrics)
    approvals: ChatApprovals | None = None
    """Where `yes ID` / `no ID` answers go (ask-mode approval in chat), if anywhere."""
    new_session_id: Callable[[], str] = field(default=lambda: secrets.token_hex(6))
    agents: dict[str, Agent] = field(default_factory=dict)
    """The other named agents, which `routes` may choose."""
    routes: Routes = field(default_factory=Routes)
    """Which agent answers each message (the default agent when none is named)."""
    file_moves: dict[str, Callable[[Attachment], Awaitable[Attachment]]] = field(
        default_factory=dict
    )
    """Per agent with a workspace of its own: how a file is moved there (move_to_workspace)."""
    profiles: Mapping[str, ProfileStore] = field(default_factory=dict)
    """Where each agent that keeps people's profiles keeps them (for /memory, /forget)."""
    daemon_state: DaemonStore | None = None
    """The inbox, outbox and chat map; None: DaemonState beside a SQLite `store`."""
    transport_state: Callable[[str], KeyValue] | None = None
    """A transport's own durable state; None: TransportState beside a SQLite `store`."""
    meter: Meter | None = None
    """The budgets and what the models cost (/usage)."""
    speech: Speech | None = None
    """What says answers aloud, where `speech` is configured (router/voice.py)."""
    shared: SharedState | None = None
    """Where several daemons share the store: each turn holds its session, and work waits for
    a daemon with a free turn slot (router/sharing.py)."""

    def __post_init__(self) -> None:
        settings = self.settings
        self.state: DaemonStore = self.daemon_state or DaemonState(_sqlite(self.store))
        self._kv: Callable[[str], KeyValue] = self.transport_state or functools.partial(
            TransportState, _sqlite(self.store)
        )
        self.admission = Admission(
            state=self.state,
            policies=self.policies,
            rate_limiter=self.rate_limiter,
            denied_reply=settings.denied_reply,
        )
        self._slots = TurnSlots(settings)
        if self.approvals is not None:
            self.approvals.waiting = self._slots.released
        self._queues: dict[str, deque[_Item]] = {}
        self._couriers: dict[str, Courier] = {}
        self._intake_failures = IntakeFailures(self.metrics)
        self._sessions = Sessions(
            store=self.store,
            state=self.state,
            settings=settings,
            new_session_id=self.new_session_id,
        )
        self._replies = Replies(
            state=self.state,
            transports=self.transports,
            policies=self.policies,
            couriers=self._couriers,
        )
        self._turns = Turns(
            agent=self.agent,
            agents=self.agents,
            settings=settings,
            state=self.state,
            kv=self._kv,
            sessions=self._sessions,
            replies=self._replies,
            transports=self.transports,
            file_moves=self.file_moves,
            metrics=self.metrics,
            speech=self.speech,
        )
        self._commands = Commands()
        self._context = Context(
            commands=self._commands,
            state=self.state,
            kv=self._kv,
            sessions=self._sessions,
            running=self._turns.running,
            admission=self.admission,
            approvals=self.approvals,
            profiles=self.profiles,
            meter=self.meter,
            speaks=self.speech is not None,
        )
        self._sharing: Sharing | None = None
        if self.shared is not None:
            turns = settings.max_concurrent_turns
            self._sharing = Sharing(
                shared=self.shared,
                answer=self._answer,
                sessions=self._sessions,
                routes=self.routes,
                commands=self._commands,
                transports=self.transports,
                queues=self._queues,
                room=lambda: 0 if self._closing else turns - len(self._queues),
                take=functools.partial(self.adopt, pulled=True),
            )
        self._tg: TaskGroup | None = None
        self._closing = False
        self._idle = anyio.Event()
        self._idle.set()

    # -- intake ---------------------------------------------------------------------------

    async def submit(self, inbound: Inbound) -> None:
        """Take an inbound message; returns once it is persisted (or deliberately dropped).

        Raises (so the adapter does not acknowledge it, and the platform redelivers) when it
        could not be persisted; a message that keeps making intake fail for another reason
        is recorded as failed and skipped, so it cannot block the ones behind it.
        """
        if self._closing:
            raise ShuttingDown()
        self.metrics.inbound.labels(inbound.transport).inc()
        self._replies.spoke(inbound.transport, inbound.chat_id, inbound.thread_id)
        try:
            admitted = await self._commands.on_arrival(self._context, inbound)
            if admitted is None:
                admitted = await self.admission.decide(inbound)
            if admitted.verdict is Verdict.ANSWER:
                await self._replies.reply(inbound, admitted.reply, finish=False)
        except StoreFullError:
            raise  # not this message's fault: it waits, unacknowledged, for space
        except Exception as exc:
            if not self._intake_failures.given_up(inbound, exc):
                raise
            return
        if admitted.verdict is Verdict.TURN:
            if not (self._sharing and await self._sharing.handed_over(inbound)):
                self._dispatch(_Item(inbound, replay=False))
            if inbound.transport in self.settings.acks and self._tg is not None:
                self._tg.start_soon(self._turns.ack, inbound)

    # -- session queues -------------------------------------------------------------------

    def _dispatch(self, item: _Item) -> None:
        assert self._tg is not None, "the router is not running"
        agent = self.routes.agent_of(item.inbound)
        if agent != item.inbound.agent:
            item = replace(item, inbound=replace(item.inbound, agent=agent))
        key = item.inbound.session_key
        command = self._commands.named(item.inbound)
        if command is not None and command.at_once:  # /stop: not behind the turn it stops
            self._tg.start_soon(self._at_once, command, item.inbound)
            return
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            if self._idle.is_set():  # the first queue: busy from now on
                self._idle = anyio.Event()
            self._tg.start_soon(self._worker, key, queue)
        queue.append(item)
        self.metrics.queue_depth.set(sum(len(q) for q in self._queues.values()))

    async def _worker(self, key: str, queue: deque[_Item]) -> None:
        """Answer one session's messages in order; a failure fails (and retries) one message,
        never the router."""
        try:
            while queue:
                item = queue[0]
                try:
                    async with self._slots.hold(item.inbound.agent):
                        await self._process(item)
                except Exception as exc:
                    if await self._failed(key, item, exc):
                        continue  # try the same message again, still first in line
                queue.popleft()
        finally:
            del self._queues[key]
            if not self._queues:
                self._idle.set()
            if self._sharing:  # a turn slot freed: work may wait for it
                self._sharing.freed()

    async def _failed(self, key: str, item: _Item, exc: Exception) -> bool:
        """After a message's processing failed: wait and return True to retry it, or record
        it as failed (with the traceback, and the user told once) and return False."""
        self._sessions.forget(key)  # what is in memory may not be on disk: reload it
        self.metrics.retries.labels("turn").inc()
        full = isinstance(exc, StoreFullError)
        if full:
            item.waits += 1
        else:
            item.attempts += 1
        if full or item.attempts < MAX_ATTEMPTS:
            delay = backoff(item.attempts + item.waits, base=0.25, cap=RETRY_CAP)
            log.warning(
                "router.turn_retry",
                message=item.inbound.message_id,
                attempt=item.attempts,
                retry_in=round(delay, 2),
                exc_info=not full,
                error=str(exc),
            )
            await anyio.sleep(delay)
            return True
        trace = "".join(traceback.format_exception(exc))
        log.error("router.message_failed", message=item.inbound.message_id, exc_info=exc)
        self.metrics.failed_inbound.labels(item.inbound.transport).inc()
        try:
            await self._replies.reply(item.inbound, BROKEN_REPLY, error=trace[-4000:])
        except Exception:  # still pending on disk: the next start replays it
            log.exception("router.record_failed", message=item.inbound.message_id)
        return False

    async def _at_once(self, command: Command, inbound: Inbound) -> None:
        """A command answered as it arrives, beside the session's turns."""
        reply = await command.run(self._context, inbound)
        try:
            await self._replies.reply(inbound, reply)
        except Exception:  # still pending on disk: the next start answers it
            log.exception("router.record_failed", message=inbound.message_id)

    async def _process(self, item: _Item) -> None:
        inbound = item.inbound
        where = {"transport": inbound.transport, "chat": inbound.chat_id}
        with structlog.contextvars.bound_contextvars(
            **where, message=inbound.message_id, agent=inbound.agent
        ):
            retried = item.replay or bool(item.attempts or item.waits)
            if self._sharing:  # holding its session, after its chat's earlier messages
                await self._sharing.answer(inbound, retried=retried)
            else:
                await self._answer(inbound, retried=retried)

    async def _answer(self, inbound: Inbound, *, retried: bool, quiet: bool = False) -> None:
        """A command's reply, a refusal or a turn's answer (see Turns.answer)."""
        command = self._commands.named(inbound)
        if command is not None:
            await self._replies.reply(inbound, await command.run(self._context, inbound))
        elif inbound.refusal:  # its files were refused: say so, and spend no model call
            await self._replies.reply(inbound, inbound.refusal)
        else:
            await self._turns.answer(inbound, retried=retried, quiet=quiet)

    # -- delivery -------------------------------------------------------------------------

    async def notify(
        self,
        transport: str,
        chat_id: str,
        text: str,
        buttons: tuple[str, ...] = (),
        *,
        files: Sequence[tuple[Attachment, str]] = (),
    ) -> int:
        """Queue a message that answers nobody (a cron reply, a notice, a question with answer
        `buttons`), split for the platform, then any `files` (with captions); how many parts."""
        return await self._replies.notify(transport, chat_id, text, buttons, files=files)

    def wake(self, transport: str) -> None:
        self._replies.wake(transport)

    async def deliver(self, name: str) -> None:
        """Send the outbox of one transport until cancelled (see rousseau.delivery)."""
        courier = self._couriers[name] = Courier(
            self.transports[name],
            self.state,
            metrics=self.metrics,
            send_timeout=self.settings.send_timeout,
        )
        await courier.run()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the session workers; replay what a crash left pending (where daemons share
        the store, pull the work waiting there as room allows); run until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            if self._sharing:
                tg.start_soon(self._sharing.run, self.wake)
            else:
                self.adopt(await self.state.pending())
            task_status.started()
            await anyio.sleep_forever()

    def adopt(self, pending: list[Inbound], *, pulled: bool = False) -> None:
        """Answer messages accepted before but never answered: what a crash left here, or
        (`pulled`, where daemons share the store) what waited for a free turn slot."""
        for inbound in pending:
            if not pulled:
                log.info("router.replay", transport=inbound.transport, message=inbound.message_id)
            self._dispatch(_Item(inbound, replay=True))

    @property
    def chats_busy(self) -> int:
        """Chats with a message being answered or waiting its turn."""
        return len(self._queues)

    async def wait_idle(self) -> None:
        """Return once no session queue holds a message (at once if none does): each one taken
        in is answered or given up on, its reply queued."""
        while self._queues:
            await self._idle.wait()

    async def drain(self, grace: float) -> bool:
        """Stop intake; give in-flight turns and their replies `grace` seconds to finish.
        True if everything finished and was delivered; what was not stays pending on disk
        and is picked up at the next start."""
        self._closing = True
        with anyio.move_on_after(grace):
            await self.wait_idle()
            names = list(self._couriers)
            while await self.state.outbox_pending(names):
                for name in names:
                    self.wake(name)
                await anyio.sleep(0.1)  # a send that fails waits for its retry time
            return True
        log.warning("router.drain_timeout", unfinished=len(self._queues))
        return False


def _sqlite(store: SessionStore) -> Store:
    if not isinstance(store, Store):
        raise TypeError("a store other than SQLite's needs its daemon_state and transport_state")
    return store
