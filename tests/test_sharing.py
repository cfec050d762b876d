"""Daemons sharing one PostgreSQL (a real server, tests/postgres) share the work: routers in
this process, each with its own connections, its own state and its own model; one of them
runs the transport (as the daemon elected to poll Telegram does) and sends every reply.
A message taken in while that daemon's turn slots are full is answered by another, each
chat's answers in order, none lost or doubled, and a daemon that dies mid-turn has its
turn answered by another."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest

from rousseau.agent import Agent, Options, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.router import ChatPolicy, RateLimiter, Router, RouterSettings
from rousseau.transports.base import MemoryTransport
from tests.postgres.server import Postgres

pytestmark = pytest.mark.anyio

LEASE = 1.5
"""Short, so that a dead daemon's turn is taken over within the test's deadline."""


@dataclass
class Model:
    """Every daemon's model: answers `name: text`, each turn first waiting for `gate`."""

    gate: Callable[[], Awaitable[None]]
    turns: list[tuple[str, str]] = field(default_factory=list)
    """(daemon, message) of every turn begun."""
    begun: anyio.Event = field(default_factory=anyio.Event)

    def provider(self, name: str) -> FunctionProvider:
        async def answer(request: Request) -> Response:
            text = request.messages[-1].text
            self.turns.append((name, text))
            self.begun.set()
            await self.gate()
            return text_reply(f"{name}: {text}")

        return FunctionProvider(answer)

    async def until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(15):
            while not condition():
                self.begun = anyio.Event()
                await self.begun.wait()


@asynccontextmanager
async def member(
    url: str,
    name: str,
    model: Model,
    transport: MemoryTransport,
    *,
    poller: bool = False,
    turns: int = 1,
) -> AsyncIterator[anyio.CancelScope]:
    """A daemon of the cluster, running until the block ends or the scope it yields is
    cancelled (as a daemon killed: it neither finishes nor frees anything). Where it is the
    `poller`, it runs the transport and sends its replies."""
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState
    from rousseau.state.postgres_kv import PostgresTransportState

    store = await PostgresStore.open(url, max_size=4)
    state = PostgresDaemonState(store, lease=LEASE)
    state.elected = frozenset({transport.name})
    await state.beat()
    router = Router(
        agent=Agent(model.provider(name), options=Options(history=store)),
        store=store,
        daemon_state=state,
        transport_state=functools.partial(PostgresTransportState, store),
        shared=state,
        transports={transport.name: transport},
        policies={transport.name: ChatPolicy(policy="open")},
        rate_limiter=RateLimiter((1000, 1.0), {}, 100),
        settings=RouterSettings(max_concurrent_turns=turns),
    )

    async def serve() -> None:
        async with state.polling(transport.name), anyio.create_task_group() as tg:
            await tg.start(transport.run, router.submit)
            await router.deliver(transport.name)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(router.run)
            tg.start_soon(state.beating)
            if poller:
                tg.start_soon(serve)
                with anyio.fail_after(10):
                    while not transport.connected:
                        await anyio.sleep(0.01)
            yield tg.cancel_scope
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def answered(transport: MemoryTransport) -> list[str]:
    return [part.text for part in transport.sent]


async def test_a_message_the_poller_has_no_slot_for_is_answered_by_another_daemon(
    postgres: Postgres,
) -> None:
    url = postgres.new_database()
    opened = anyio.Event()

    async def gate() -> None:
        if model.turns[0][1] == "first" and len(model.turns) == 1:
            await opened.wait()  # the poller's one slot stays busy

    model = Model(gate)
    telegram = MemoryTransport("telegram")
    async with (
        member(url, "poller", model, telegram, poller=True),
        member(url, "other", model, MemoryTransport("telegram")),
    ):
        await telegram.inject("first", chat_id="a")
        await model.until(lambda: len(model.turns) == 1)
        await telegram.inject("second", chat_id="b")
        with anyio.fail_after(15):
            await telegram.wait_sent(1)
        assert answered(telegram) == ["other: second"]  # sent by the poller, which runs it
        opened.set()
        with anyio.fail_after(15):
            await telegram.wait_sent(2)
    assert answered(telegram) == ["other: second", "poller: first"]
    assert model.turns == [("poller", "first"), ("other", "second")]


async def test_three_daemons_run_turns_at_once_each_chat_in_order_none_lost_or_doubled(
    postgres: Postgres,
) -> None:
    """24 chats of three messages each reach the poller; the model's turns wait until six
    run at once, which only three daemons of two slots each can do."""
    url = postgres.new_database()
    everyone = anyio.Event()

    async def gate() -> None:
        if len(model.turns) >= 6:
            everyone.set()
        await everyone.wait()

    model = Model(gate)
    telegram = MemoryTransport("telegram")
    sent = [(f"c{chat}", f"c{chat} m{n}") for n in range(3) for chat in range(24)]
    async with (
        member(url, "d0", model, telegram, poller=True, turns=2),
        member(url, "d1", model, MemoryTransport("telegram"), turns=2),
        member(url, "d2", model, MemoryTransport("telegram"), turns=2),
    ):
        for chat, text in sent:
            await telegram.inject(text, chat_id=chat)
        with anyio.fail_after(30):
            await telegram.wait_sent(len(sent))
        await settled_cluster(url)
    texts = [part.text.split(": ", 1) for part in telegram.sent]
    assert Counter(text for _, text in texts) == Counter(text for _, text in sent)  # each once
    for chat in {chat for chat, _ in sent}:
        order = [text for _, text in texts if text.startswith(f"{chat} ")]
        assert order == [f"{chat} m{n}" for n in range(3)], order
    ran = Counter(name for name, _ in texts)
    assert set(ran) == {"d0", "d1", "d2"}, ran
    assert sorted(model.turns) == sorted((name, text) for name, text in texts)


async def settled_cluster(url: str) -> None:
    """Nothing is left to answer or to send in the shared state."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        for table in ("inbox", "outbox"):
            cursor = await db.execute(f"SELECT count(*) FROM {table} WHERE status = 'pending'")
            assert await cursor.fetchone() == (0,), table


async def test_a_daemon_killed_mid_turn_has_its_turn_answered_by_another(
    postgres: Postgres,
) -> None:
    url = postgres.new_database()
    opened, never = anyio.Event(), anyio.Event()

    async def gate() -> None:
        name, text = model.turns[-1]
        if name == "doomed":
            await never.wait()  # it dies in this turn
        elif text == "first":
            await opened.wait()

    model = Model(gate)
    telegram = MemoryTransport("telegram")
    async with member(url, "poller", model, telegram, poller=True):
        async with member(url, "doomed", model, MemoryTransport("telegram")) as doomed:
            await telegram.inject("first", chat_id="a")
            await model.until(lambda: len(model.turns) == 1)
            await telegram.inject("second", chat_id="b")
            await model.until(lambda: ("doomed", "second") in model.turns)
            doomed.cancel()
        async with member(url, "heir", model, MemoryTransport("telegram")):
            with anyio.fail_after(15):
                await telegram.wait_sent(1)  # once the dead daemon's lease ran out
            opened.set()
            with anyio.fail_after(15):
                await telegram.wait_sent(2)
            await settled_cluster(url)
    assert sorted(answered(telegram)) == ["heir: second", "poller: first"]


async def test_a_chats_earlier_command_another_daemon_took_in_is_answered_as_a_command(
    postgres: Postgres,
) -> None:
    """Another daemon took `/help` in and has not answered it: the next message of the
    chat answers it first, as the command it is, not as a turn of the model."""
    from rousseau.messages import Inbound
    from rousseau.router.commands import Commands
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

    url = postgres.new_database()
    other = await PostgresStore.open(url, max_size=2)
    busy = PostgresDaemonState(other)
    await busy.beat()
    await busy.accept(
        Inbound(transport="telegram", chat_id="a", sender_id="a", message_id="h", text="/help")
    )

    async def gate() -> None:
        pass

    model = Model(gate)
    telegram = MemoryTransport("telegram")
    async with member(url, "poller", model, telegram, poller=True):
        await telegram.inject("hello", chat_id="a")
        with anyio.fail_after(15):
            await telegram.wait_sent(2)
    await other.aclose()
    assert answered(telegram) == [Commands().help, "poller: hello"]
    assert model.turns == [("poller", "hello")]
