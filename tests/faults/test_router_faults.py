"""Faults injected into a running router on the in-memory transport and a real SQLite file:
a full disk, a failing store, a poison message, a hung model, redeliveries after a restart,
and a crash between saving an answer and queueing it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Message, Options, Request, Response, StoreError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.messages import Outbound
from rousseau.router import (
    BROKEN_REPLY,
    TIMEOUT_REPLY,
    ChatPolicy,
    RateLimiter,
    Router,
    RouterSettings,
)
from rousseau.router.turns import Turns
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from rousseau.transports.base import MemoryTransport
from tests.helpers import settled

pytestmark = pytest.mark.anyio


class Echo:
    """Answers 'echo: <last user text>' and counts the calls per text."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.before: Callable[[str], Any] | None = None

    async def __call__(self, request: Request) -> Response:
        text = request.messages[-1].text
        self.calls.append(text)
        if self.before is not None:
            await self.before(text)
        return text_reply("echo: " + text[:100])


@asynccontextmanager
async def running(
    store: Store,
    provider: Any,
    *,
    names: tuple[str, ...] = ("memory",),
    rate: tuple[int, float] = (1000, 1.0),
    turn_timeout: float = 600.0,
) -> AsyncIterator[tuple[Router, dict[str, MemoryTransport]]]:
    transports = {name: MemoryTransport(name) for name in names}
    router = Router(
        agent=Agent(provider, options=Options(history=store)),
        store=store,
        transports=dict(transports),
        policies={n: ChatPolicy(allowlist=frozenset({"user", "u2"})) for n in names},
        rate_limiter=RateLimiter(rate, {}, 100),
        settings=RouterSettings(denied_reply="slow down", turn_timeout=turn_timeout),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        for name, transport in transports.items():
            await tg.start(transport.run, router.submit)
            tg.start_soon(router.deliver, name)
        with anyio.fail_after(60):
            yield router, transports
        tg.cancel_scope.cancel()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed turn is retried within 50 ms."""
    import rousseau.router.core

    monkeypatch.setattr(rousseau.router.core, "RETRY_CAP", 0.05)


def texts(transport: MemoryTransport) -> list[str]:
    return [m.text for m in transport.sent]


def lose_once(monkeypatch: pytest.MonkeyPatch, role: str) -> None:
    """The first history write of a `role` message fails, its statements run and undone (as
    an I/O error at the end of a write would)."""
    real_append = Store._append
    failures = [1]

    def append(session_id: str, message: Message, usage: Any) -> Callable[[Any], None]:
        op = real_append(session_id, message, usage)
        if message.role.value != role or not failures[0]:
            return op
        failures[0] -= 1

        def lost(db: sqlite3.Connection) -> None:
            op(db)
            raise sqlite3.OperationalError("disk I/O error")

        return lost

    monkeypatch.setattr(Store, "_append", staticmethod(append))


async def settle(router: Router, transport: MemoryTransport, count: int) -> list[str]:
    """What `transport` was sent, once `count` parts were and everything taken in is
    answered and sent: anything sent twice has shown by then."""
    await transport.wait_sent(count)
    await settled(router, transport.name)
    return texts(transport)


async def test_a_full_disk_mid_turn_loses_and_doubles_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    model = Echo()
    space = anyio.Event()

    async def fill_the_disk_once(text: str) -> None:
        if not space.is_set():  # the first turn: the disk fills up under it
            space.set()
            await store.call(
                lambda db: db.execute(
                    "PRAGMA max_page_count = " + str(db.execute("PRAGMA page_count").fetchone()[0])
                )
            )

    model.before = fill_the_disk_once
    big = "x" * 30_000  # each message needs new pages
    acknowledged: list[str] = []
    refused: list[str] = []
    with capture_logs() as logs:
        async with running(store, FunctionProvider(model)) as (router, transports):
            t = transports["memory"]
            for i in range(6):
                try:
                    await t.inject(f"m{i} {big}", message_id=f"id{i}")
                    acknowledged.append(f"m{i}")
                except StoreError:
                    refused.append(f"m{i}")  # not acknowledged: the platform redelivers it
            assert refused, "with the disk full, new messages are not taken"
            with anyio.fail_after(10):  # a turn meets the full disk, and waits for space
                while "router.turn_retry" not in [e["event"] for e in logs]:
                    await anyio.sleep(0.01)
            await store.call(lambda db: db.execute("PRAGMA max_page_count = 1073741823"))
            for name in refused:  # the platform's redelivery
                await t.inject(f"{name} {big}", message_id=f"id{name[1:]}")
            sent = await settle(router, t, 6)
    assert sorted(s.split()[1] for s in sent) == [f"m{i}" for i in range(6)]
    assert len(sent) == 6, "every message answered exactly once"
    assert all(s.startswith("echo: m") for s in sent)
    assert [e["event"] for e in logs].count("store.full") >= 1, "the full disk was logged"
    store.close()


async def test_a_store_error_finishing_a_turn_spares_the_other_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s.db")
    model = Echo()
    real_finish = DaemonState.finish
    failures = {"a": 2}

    async def flaky_finish(self: DaemonState, inbound: Any, parts: Any, **kw: Any) -> None:
        if inbound is not None and inbound.transport == "a" and failures["a"]:
            failures["a"] -= 1
            raise StoreError("session store: disk I/O error")
        await real_finish(self, inbound, parts, **kw)

    monkeypatch.setattr(DaemonState, "finish", flaky_finish)
    async with running(store, FunctionProvider(model), names=("a", "b")) as (router, transports):
        await transports["a"].inject("to a", message_id="a1")
        await transports["b"].inject("to b", message_id="b1")
        assert await settle(router, transports["b"], 1) == ["echo: to b"]
        assert await settle(router, transports["a"], 1) == ["echo: to a"]
    assert model.calls.count("to a") == 1, "the finished turn was not run again"
    store.close()


async def test_a_store_error_in_delivery_retries_and_sends_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s.db")
    real_due = DaemonState.due
    failures = [2]

    async def flaky_due(self: DaemonState, transport: str, *a: Any, **kw: Any) -> Any:
        if transport == "a" and failures[0]:
            failures[0] -= 1
            raise StoreError("session store: database is locked")
        return await real_due(self, transport, *a, **kw)

    monkeypatch.setattr(DaemonState, "due", flaky_due)
    async with running(store, FunctionProvider(Echo()), names=("a", "b")) as (router, transports):
        await transports["a"].inject("to a")
        await transports["b"].inject("to b")
        assert await settle(router, transports["b"], 1) == ["echo: to b"]
        assert await settle(router, transports["a"], 1) == ["echo: to a"]
    store.close()


@pytest.mark.usefixtures("fast_retries")
async def test_a_poison_message_fails_alone_and_the_next_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s.db")
    real_append = Turns._append_user

    async def poisoned(self: Turns, session: Any, inbound: Any) -> None:
        if "poison" in inbound.text:
            raise ValueError("cannot handle this message")
        await real_append(self, session, inbound)

    monkeypatch.setattr(Turns, "_append_user", poisoned)
    with capture_logs() as logs:
        async with running(store, FunctionProvider(Echo())) as (router, transports):
            t = transports["memory"]
            await t.inject("poison", message_id="p")
            await t.inject("fine", message_id="f")
            sent = await settle(router, t, 2)
    assert sent == [BROKEN_REPLY, "echo: fine"], "the user is told once, then served"
    row = store.call_sync(
        lambda db: db.execute("SELECT status, error FROM inbox WHERE message_id = 'p'").fetchone()
    )
    assert row[0] == "failed" and "ValueError: cannot handle this message" in row[1]
    failed = [e for e in logs if e["event"] == "router.message_failed"]
    assert len(failed) == 1 and failed[0]["exc_info"]  # logged with its traceback
    store.close()


async def test_a_hung_model_times_out_and_the_user_is_told(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")

    async def never(request: Request) -> Response:
        if "hang" in request.messages[-1].text:
            await anyio.sleep_forever()
        return text_reply("fine")

    async with running(store, FunctionProvider(never), turn_timeout=0.5) as (router, transports):
        t = transports["memory"]
        await t.inject("hang")
        await t.inject("and then?")
        assert await settle(router, t, 2) == [TIMEOUT_REPLY, "fine"]
    store.close()


async def test_redeliveries_after_a_restart_cost_the_sender_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    model = Echo()
    async with running(store, FunctionProvider(model), rate=(20, 60.0)) as (router, transports):
        for i in range(20):
            await transports["memory"].inject(f"m{i}", message_id=f"id{i}")
        await settle(router, transports["memory"], 20)
    store.close()
    store = Store(path)
    async with running(store, FunctionProvider(model), rate=(20, 60.0)) as (router, transports):
        t = transports["memory"]
        for i in range(20):  # the platform delivers them all again after the restart
            await t.inject(f"m{i}", message_id=f"id{i}")
        await t.inject("new one", message_id="new")
        assert await settle(router, t, 1) == ["echo: new one"]
    assert len(model.calls) == 21
    store.close()


async def test_a_turn_finished_before_a_crash_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer was saved, then the process died before the reply was queued: the replay
    queues that answer; it does not run a turn on top of the model's own reply."""
    path = tmp_path / "s.db"
    store = Store(path)
    model = Echo()
    crashed = anyio.Event()

    async def crash(self: DaemonState, inbound: Any, parts: Any, **kw: Any) -> None:
        crashed.set()
        await anyio.sleep_forever()  # the process dies here, before the commit

    real_finish = DaemonState.finish
    monkeypatch.setattr(DaemonState, "finish", crash)
    async with running(store, FunctionProvider(model)) as (router, transports):
        await transports["memory"].inject("hello", message_id="h1")
        await crashed.wait()
    store.close()
    monkeypatch.setattr(DaemonState, "finish", real_finish)
    store = Store(path)
    async with running(store, FunctionProvider(model)) as (router, transports):
        assert await settle(router, transports["memory"], 1) == ["echo: hello"]
    assert model.calls == ["hello"]
    store.close()


async def test_a_crash_mid_tool_loop_replays_the_turn(tmp_path: Path) -> None:
    """Only a finished answer counts: a turn cut short (its last message is not a final
    answer) is run again at the next start."""
    path = tmp_path / "s.db"
    store = Store(path)
    await store.create_session("s1")
    await store.append_message("s1", Message.user("q"))
    await store.flush()

    def op(db: sqlite3.Connection) -> None:
        db.execute(
            "INSERT INTO inbox (transport, message_id, chat_id, sender_id, text, at, status,"
            " appended, received_at) VALUES ('memory', 'x', 'chat', 'user', 'q', 0, 'pending',"
            " (SELECT max(id) FROM messages), 0)"
        )
        db.execute(
            "INSERT INTO chat_sessions (session_key, session_id, updated_at)"
            " VALUES ('memory:chat', 's1', 0)"
        )

    store.call_sync(op, write=True)
    model = Echo()
    async with running(store, FunctionProvider(model)) as (router, transports):
        assert await settle(router, transports["memory"], 1) == ["echo: q"]
    assert model.calls == ["q"]
    store.close()


async def test_a_turn_waiting_for_approval_holds_no_turn_slot(tmp_path: Path) -> None:
    from rousseau.agent import ApprovalRequest, Decision
    from rousseau.agent.testing import tool_reply
    from rousseau.approvals import ChatApprovals
    from rousseau.tools import builtin_registry

    def model(request: Request) -> Response:
        last = request.messages[-1]
        if last.text == "needs approval":
            return tool_reply("read", {"path": "notes.md"})
        if not last.text:  # the tool's result came back
            return text_reply("done")
        return text_reply("echo: " + last.text)

    approvals = ChatApprovals(owners=["memory:user"], timeout=30)

    class AskEveryCall:
        async def approve(self, request: ApprovalRequest) -> Decision:
            return await approvals.ask(request)

    store = Store(tmp_path / "s.db")
    transport = MemoryTransport()
    router = Router(
        agent=Agent(
            FunctionProvider(model),
            builtin_registry(str(tmp_path)),
            Options(history=store, approver=AskEveryCall()),
        ),
        store=store,
        transports={"memory": transport},
        policies={"memory": ChatPolicy(allowlist=frozenset({"user", "u2"}))},
        rate_limiter=RateLimiter((100, 1.0), {}, 100),
        approvals=approvals,
        # one turn at a time: the waiting one must give its place up
        settings=RouterSettings(max_concurrent_turns=1),
    )
    approvals.notify = router.notify
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        await tg.start(transport.run, router.submit)
        tg.start_soon(router.deliver, "memory")
        with anyio.fail_after(20):
            await transport.inject("needs approval", chat_id="a")
            asked = await transport.wait_sent(2)  # in the chat, and to the owner
            assert all(m.text.startswith("Approve read?") for m in asked)
            await transport.inject("meanwhile", chat_id="b", sender_id="u2")
            sent = await transport.wait_sent(3)
            assert sent[2].text == "echo: meanwhile" and approvals.pending
            code = asked[0].text.split("[", 1)[1].split("]", 1)[0]
            await transport.inject(f"yes {code}", chat_id="a")
            sent = await transport.wait_sent(5)
        tg.cancel_scope.cancel()
    assert sorted(m.text for m in sent[3:]) == sorted([f"Approved {code}.", "done"])
    store.close()


async def test_a_stop_does_not_wait_for_replies_no_transport_here_can_send(
    tmp_path: Path,
) -> None:
    """A reply queued for a transport this daemon does not run (configured by another, or no
    longer) stays for later; it must not make every stop wait out the whole grace."""
    store = Store(tmp_path / "s.db")
    await DaemonState(store).finish(
        None, [Outbound(transport="gone", chat_id="c", text="for later")]
    )
    async with running(store, FunctionProvider(Echo())) as (router, transports):
        await transports["memory"].inject("hello")
        await transports["memory"].wait_sent(1)
        with anyio.fail_after(10):
            assert await router.drain(grace=30.0)  # everything *it* can send is sent
    assert await DaemonState(store).outbox_pending() == 1  # and the other is kept
    store.close()


async def test_a_stop_waits_for_a_turn_that_starts_while_it_drains(tmp_path: Path) -> None:
    """A message taken in as the daemon stops (adopted from a dead daemon, or a submit
    already past its check) starts a turn while the drain waits. Each new queue used to
    replace the event the drain was waiting on, so it waited out the whole grace and
    reported the turns unfinished, though both had answered."""
    from rousseau.messages import Inbound

    store = Store(tmp_path / "s.db")
    echo = Echo()
    release = anyio.Event()

    async def held(text: str) -> None:
        if text == "first":
            await release.wait()

    echo.before = held
    late = Inbound(
        transport="memory", chat_id="b", sender_id="u2", message_id="late", text="second"
    )
    async with running(store, FunctionProvider(echo)) as (router, transports):
        memory = transports["memory"]
        await memory.inject("first", chat_id="a")
        while echo.calls != ["first"]:
            await anyio.sleep(0.01)
        assert await DaemonState(store).accept(late)
        drained: list[bool] = []

        async def drain() -> None:
            drained.append(await router.drain(grace=10.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await anyio.wait_all_tasks_blocked()  # the drain waits (for the first turn)
            router.adopt([late])
            await memory.wait_sent(1)  # "second" answered
            release.set()
            with anyio.fail_after(5):  # well within the grace
                while not drained:
                    await anyio.sleep(0.01)
        assert drained == [True]
        assert sorted(texts(memory)) == ["echo: first", "echo: second"]
    store.close()


async def test_a_turns_history_is_checked_by_its_answers_write_not_flushed_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn waits on the database once at its end: the write that queues its answer
    commits the history before it (and fails if that was lost), with no flush of its own.
    Queued in the same step, the two share a commit when the database thread takes them
    together, as it mostly does under load; that part is a race, so it is not asserted."""
    store = Store(tmp_path / "s.db")
    flushed: list[str | None] = []
    real_flush = Store.flush

    async def flush(self: Store, session_id: str | None = None) -> None:
        flushed.append(session_id)
        await real_flush(self, session_id)

    monkeypatch.setattr(Store, "flush", flush)
    async with running(store, FunctionProvider(Echo())) as (router, transports):
        await transports["memory"].inject("hi", message_id="h1")
        assert await settle(router, transports["memory"], 1) == ["echo: hi"]
    assert flushed == [], "no round trip to the database for the history alone"
    roles = store.call_sync(
        lambda db: db.execute("SELECT role FROM messages ORDER BY id").fetchall()
    )
    assert [r[0] for r in roles] == ["user", "assistant"]
    store.close()


@pytest.mark.usefixtures("fast_retries")
async def test_a_turn_whose_history_was_not_saved_is_not_answered_but_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s.db")
    lose_once(monkeypatch, "assistant")
    model = Echo()
    async with running(store, FunctionProvider(model)) as (router, transports):
        await transports["memory"].inject("hi", message_id="h1")
        assert await settle(router, transports["memory"], 1) == ["echo: hi"]
    assert model.calls == ["hi", "hi"], "the turn ran again, its first answer never sent"
    roles = store.call_sync(
        lambda db: db.execute("SELECT role FROM messages ORDER BY id").fetchall()
    )
    assert [r[0] for r in roles] == ["user", "assistant"]
    store.close()


@pytest.mark.usefixtures("fast_retries")
async def test_a_turn_failing_on_the_store_reports_its_lost_history_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history write lost in a turn that then fails on the store is reported with that
    failure: the retry starts clean, with one model call."""
    store = Store(tmp_path / "s.db")
    lose_once(monkeypatch, "user")
    real_prepare = Agent._prepare
    failures = [1]

    async def prepare(self: Agent, session: Any) -> None:
        if failures[0]:
            failures[0] -= 1
            raise StoreError("session store: disk I/O error")
        await real_prepare(self, session)

    monkeypatch.setattr(Agent, "_prepare", prepare)
    model = Echo()
    async with running(store, FunctionProvider(model)) as (router, transports):
        await transports["memory"].inject("hi", message_id="h1")
        assert await settle(router, transports["memory"], 1) == ["echo: hi"]
    assert model.calls == ["hi"], "no second model call for a failure already reported"
    store.close()
