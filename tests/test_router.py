"""The Router on the in-memory transport: policy, dedupe, ordering, delivery, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Message, Options, Request, Response, StreamEvent
from rousseau.agent.testing import FunctionProvider, ScriptedProvider, text_reply
from rousseau.router import FAILED_REPLY, ChatPolicy, RateLimiter, Router, RouterSettings
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState
from rousseau.streaming import StreamSettings
from rousseau.transports.base import MemoryTransport
from tests.helpers import routing, settled

pytestmark = pytest.mark.anyio


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


@asynccontextmanager
async def running(
    provider: Any,
    store: Store | None = None,
    *,
    policy: ChatPolicy | None = None,
    rate: tuple[int, float] = (100, 1.0),
    max_length: int = 4096,
    transport: MemoryTransport | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[Router, MemoryTransport]]:
    own = store is None
    store = store or Store(":memory:")
    transport = transport or MemoryTransport(max_length=max_length)
    router = Router(
        agent=Agent(provider, options=Options(history=store)),
        store=store,
        transports={"memory": transport},
        policies={"memory": policy or ChatPolicy(allowlist=frozenset({"user", "u2"}))},
        rate_limiter=RateLimiter(rate, {}, 100),
        settings=RouterSettings(denied_reply="slow down", **settings),
    )
    async with routing(router, transport):
        yield router, transport
    if own:
        store.close()


async def test_reply_reaches_the_chat() -> None:
    async with running(FunctionProvider(echo)) as (_, t):
        await t.inject("hello", chat_id="c1")
        [out] = await t.wait_sent(1)
    assert (out.chat_id, out.text, out.reply_to) == ("c1", "echo: hello", "m1")


async def test_stranger_costs_no_model_call_and_is_logged_once() -> None:
    provider = FunctionProvider(echo)
    async with running(provider) as (router, t):
        with capture_logs() as logs:
            await t.inject("hi", sender_id="eve")
            await t.inject("hi again", sender_id="eve")
        await settled(router)
    assert provider.requests == [] and t.sent == []
    warned = [e for e in logs if e["event"] == "router.ignored_sender"]
    assert len(warned) == 1 and "memory.allowlist" in warned[0]["hint"]


async def test_pairing_code_then_approval_admits() -> None:
    store = Store(":memory:")
    async with running(FunctionProvider(echo), store, policy=ChatPolicy(policy="pairing")) as (
        _,
        t,
    ):
        await t.inject("hi", sender_id="eve", chat_id="e")
        [code_msg] = await t.wait_sent(1)
        code = code_msg.text.split("rousseau pair approve ")[1].split()[0]
        assert len(code) == 8
        state = DaemonState(store)
        [pending] = await anyio.to_thread.run_sync(state.pairing_codes_sync)
        assert (pending.code, pending.sender_id) == (code, "eve")
        assert await anyio.to_thread.run_sync(state.approve_sync, code.lower()) is not None
        await t.inject("now?", sender_id="eve", chat_id="e")
        sent = await t.wait_sent(2)
    assert sent[1].text == "echo: now?"


async def test_pairing_makes_room_for_every_newcomer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rousseau.state.daemon_state.MAX_PENDING_CODES", 3)
    store = Store(":memory:")
    async with running(FunctionProvider(echo), store, policy=ChatPolicy(policy="pairing")) as (
        _,
        t,
    ):
        for i in range(5):
            await t.inject("hi", sender_id=f"s{i}", chat_id=f"c{i}")
        sent = await t.wait_sent(5)
        pending = await anyio.to_thread.run_sync(DaemonState(store).pairing_codes_sync)
    assert sorted(s.chat_id for s in sent) == [f"c{i}" for i in range(5)]
    assert [c.sender_id for c in pending] == ["s2", "s3", "s4"]  # the oldest made room


async def test_groups_need_a_mention() -> None:
    provider = FunctionProvider(echo)
    async with running(provider) as (_, t):
        await t.inject("chatter", chat_id="g", is_group=True)
        await t.inject("@bot hi", chat_id="g", is_group=True, mentioned=True)
        [out] = await t.wait_sent(1)
    assert out.text == "echo: @bot hi" and len(provider.requests) == 1


async def test_duplicate_delivery_is_answered_once() -> None:
    provider = FunctionProvider(echo)
    async with running(provider) as (router, t):
        await t.inject("once", message_id="same")
        await t.inject("once", message_id="same")
        await t.wait_sent(1)
        await settled(router)
    assert len(t.sent) == 1 and len(provider.requests) == 1


async def test_slow_session_never_delays_another() -> None:
    release = anyio.Event()

    async def slow_for_a(request: Request) -> Response:
        if "from a" in request.messages[-1].text:
            await release.wait()
        return echo(request)

    async with running(FunctionProvider(slow_for_a)) as (_, t):
        await t.inject("from a", chat_id="a")
        await t.inject("from b", chat_id="b", sender_id="u2")
        [first] = await t.wait_sent(1)
        assert first.chat_id == "b"
        release.set()
        await t.wait_sent(2)


async def test_one_session_is_answered_in_order() -> None:
    async def varying(request: Request) -> Response:
        text = request.messages[-1].text
        await anyio.sleep(0.2 if text == "first" else 0)
        return echo(request)

    async with running(FunctionProvider(varying)) as (_, t):
        for text in ("first", "second", "third"):
            await t.inject(text, chat_id="same")
        sent = await t.wait_sent(3)
    assert [o.text for o in sent] == ["echo: first", "echo: second", "echo: third"]


async def test_commands() -> None:
    store = Store(":memory:")
    provider = FunctionProvider(lambda r: text_reply(f"{len(r.messages)} messages"))
    async with running(provider, store) as (_, t):
        await t.inject("one")
        await t.wait_sent(1)
        await t.inject("/new")
        await t.inject("two")
        await t.inject("/help")
        sent = await t.wait_sent(4)
    assert [o.text for o in sent][:3] == ["1 messages", "Started a new conversation.", "1 messages"]
    assert "/new" in sent[3].text
    assert len(await store.list_sessions()) == 2


async def test_wait_idle_returns_once_every_queued_message_is_answered() -> None:
    release = anyio.Event()

    async def gated(request: Request) -> Response:
        await release.wait()
        return echo(request)

    idle = anyio.Event()
    async with running(FunctionProvider(gated)) as (router, t):

        async def wait() -> None:
            await router.wait_idle()
            idle.set()

        async with anyio.create_task_group() as tg:
            await t.inject("one", chat_id="a")
            await t.inject("two", chat_id="b", sender_id="u2")
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert not idle.is_set()  # both turns wait for the model
            release.set()
            await idle.wait()
        assert await router.state.pending() == []  # both answered, their replies queued
        sent = await t.wait_sent(2)
    assert sorted(o.text for o in sent) == ["echo: one", "echo: two"]


async def test_failure_gives_an_honest_reply_and_keeps_the_message() -> None:
    store = Store(":memory:")
    async with running(ScriptedProvider(RuntimeError("boom")), store) as (_, t):
        await t.inject("please work", chat_id="f")
        [out] = await t.wait_sent(1)
    assert out.text == FAILED_REPLY
    [info] = await store.list_sessions()
    session = await store.load(info.id)
    assert session is not None and session.messages[-1].text == "please work"


async def test_long_reply_is_split_and_nothing_lost() -> None:
    long = " ".join(f"word{i}" for i in range(400))
    async with running(FunctionProvider(lambda r: text_reply(long)), max_length=500) as (
        router,
        t,
    ):
        await t.inject("talk")
        await settled(router)
        sent = await t.wait_sent(2)
    assert all(len(o.text) <= 500 for o in sent)
    assert " ".join(o.text for o in sent).split() == long.split()


async def test_failed_sends_are_retried_and_sent_once() -> None:
    async with running(FunctionProvider(echo)) as (router, t):
        t.fail_sends = 1
        await t.inject("retry me")
        with anyio.fail_after(10):
            [out] = await t.wait_sent(1)
        await settled(router)
    assert out.text == "echo: retry me" and len(t.sent) == 1


async def test_pending_inbound_is_replayed_after_a_crash(tmp_path: Path) -> None:
    from rousseau.messages import Inbound

    store = Store(tmp_path / "s.db")
    inbound = Inbound(
        transport="memory", chat_id="c", sender_id="user", message_id="x1", text="lost?"
    )
    await DaemonState(store).accept(inbound)  # accepted, then the process died
    provider = FunctionProvider(echo)
    async with running(provider, store) as (router, t):
        [out] = await t.wait_sent(1)
        await t.inject("lost?", message_id="x1")  # the platform redelivers: still once
        await settled(router)
    assert out.text == "echo: lost?" and len(t.sent) == 1 and len(provider.requests) == 1
    store.close()


async def test_rate_limit_replies_once_and_skips_the_model() -> None:
    provider = FunctionProvider(echo)
    async with running(provider, rate=(2, 60.0)) as (router, t):
        for i in range(5):
            await t.inject(f"m{i}")
        await t.wait_sent(3)
        await settled(router)
    assert len(provider.requests) == 2
    assert [o.text for o in t.sent].count("slow down") == 1


async def test_evicted_sessions_reload_with_their_history() -> None:
    provider = FunctionProvider(lambda r: text_reply(f"{len(r.messages)} messages"))
    async with running(provider, session_cache_messages=3) as (router, t):
        for i in range(3):
            await t.inject(f"a{i}", chat_id="a")
            await t.inject(f"b{i}", chat_id="b", sender_id="u2")
            await t.wait_sent(2 * (i + 1))
        assert len(router._sessions) == 1  # over budget: only the newest session stays
    # Each chat's third turn still saw its whole history: 2 earlier exchanges + the question.
    assert [o.text for o in t.sent if o.chat_id == "a"] == [
        "1 messages",
        "3 messages",
        "5 messages",
    ]


async def test_a_message_counts_only_its_own_session_against_the_cache_bound() -> None:
    """Keeping the session cache within its bound looks at the session a message is for, not
    at every cached one: counting them all at each message cost 2% of its CPU with 160 chats."""
    looked: list[str] = []

    class Watched(list[Message]):
        def __init__(self, messages: list[Message], chat: str) -> None:
            super().__init__(messages)
            self.chat = chat

        def __len__(self) -> int:
            looked.append(self.chat)
            return super().__len__()

    async with running(FunctionProvider(echo)) as (router, t):
        for sent, chat in enumerate(("a", "b", "c"), start=1):
            inbound = await t.inject("hi", chat_id=chat)
            await t.wait_sent(sent)
            session = await router._sessions.get(inbound)
            session.messages = Watched(session.messages, chat)
        looked.clear()
        await t.inject("again", chat_id="a")
        [*_, out] = await t.wait_sent(4)
    assert out.text == "echo: again"
    assert "a" in looked and {"b", "c"}.isdisjoint(looked)


async def test_a_fast_turn_starts_no_typing_or_preview_task() -> None:
    """Typing and the preview start when they are due (half a second in, one interval after
    the first token): a turn that ends before starts no task for them (one started and
    cancelled per turn cost 2-3% of a message's CPU)."""
    others: list[set[str]] = []

    def answer(request: Request) -> Response:
        tasks = asyncio.all_tasks()
        others.append({t.get_name() for t in tasks})
        return echo(request)

    editing = EditingTransport()
    settings = {"memory": StreamSettings()}
    async with running(FunctionProvider(answer), transport=editing, streaming=settings) as (_, t):
        await t.inject("hi")
        [out] = await t.wait_sent(1)
    assert out.text == "echo: hi" and others
    assert (
        not {f"rousseau.{n}" for n in ("router.turns.Turns._typing", "streaming.Preview.run")}
        & others[0]
    )
    assert editing.previews == []  # a preview is shown a second after the first token


class EditingTransport(MemoryTransport):
    """A memory transport whose replies stream: each preview shown or edited is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.previews: list[tuple[str, str]] = []
        """(message id, text) of each preview update, in order."""
        self.shown = anyio.Event()

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        shown = message_id or f"p{len({m for m, _ in self.previews}) + 1}"
        self.previews.append((shown, text))
        self.shown.set()
        return shown


class Paused:
    """A model that writes a first word, then waits for `go` before the rest."""

    name = "paused"

    def __init__(self) -> None:
        self.go = anyio.Event()

    async def complete(self, request: Request) -> Response:
        await self.go.wait()
        return text_reply("thinking about it: done")

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        yield StreamEvent.text_delta("thinking")
        await self.go.wait()
        yield StreamEvent.text_delta(" about it: done")
        yield StreamEvent.final(text_reply("thinking about it: done"))


@pytest.mark.parametrize("said_below", [False, True])
async def test_an_answer_goes_below_what_was_said_after_its_preview(said_below: bool) -> None:
    """An edit far up the chat notifies nobody: once something was said below the preview
    (an approval's "Denied", another message), the answer is sent new, at the bottom, and the
    preview is collapsed to a mark. With nothing below, the preview becomes the answer."""
    from rousseau.streaming import LEFTOVER

    model, editing = Paused(), EditingTransport()
    settings = {"memory": StreamSettings(interval=0.01)}
    async with running(model, transport=editing, streaming=settings) as (router, t):
        await t.inject("question")
        with anyio.fail_after(10):
            await editing.shown.wait()
        if said_below:
            await router.notify("memory", "chat", "Denied ABCD.")
            await t.wait_sent(1)
        model.go.set()
        sent = await t.wait_sent(3 if said_below else 1)
    answer = [s for s in sent if s.text == "thinking about it: done"]
    assert len(answer) == 1
    if said_below:
        assert answer[0].replaces is None
        assert [(s.text, s.replaces) for s in sent[1:]] == [
            (LEFTOVER, "p1"),
            ("thinking about it: done", None),
        ]
    else:
        assert answer[0].replaces == "p1" and len(sent) == 1


def test_rate_limiter_keys_are_bounded() -> None:
    limiter = RateLimiter((1, 60.0), {}, max_keys=100)
    for i in range(1000):
        limiter.allow("t", str(i), now=0.0)
    assert len(limiter) == 100
    assert not limiter.allow("t", "999", now=1.0)
    assert limiter.allow("t", "999", now=61.0)


async def test_a_turn_finished_but_not_queued_is_answered_with_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is kept in the session as the turn ends, the files it sent with the
    inbound; when queueing them fails (a full disk, or the daemon stopping right then),
    the next try answers from the stored text, with the files."""
    from rousseau.agent import PatternApprover, PatternRule, StoreError
    from rousseau.agent.testing import tool_reply
    from rousseau.media import BlobStore
    from rousseau.media.tool import SendFileTool
    from rousseau.tools.base import Registry
    from rousseau.tools.fs import Workspace

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "chart.png").write_bytes(b"\x89PNG" + bytes(60))
    registry = Registry()
    registry.register(
        SendFileTool(Workspace(tmp_path / "ws"), BlobStore(folder=tmp_path / "m"), {"memory": 999})
    )

    def answer(request: Request) -> Response:
        if request.messages[-1].tool_results:
            return text_reply("Here.")
        return tool_reply("send_file", {"path": "chart.png", "caption": "Nov"})

    queue = DaemonState.finish
    failures = [StoreError("store: disk full")]

    async def finish_once_failing(self: DaemonState, *args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        await queue(self, *args, **kwargs)

    monkeypatch.setattr(DaemonState, "finish", finish_once_failing)
    store = Store(tmp_path / "s.db")
    provider = FunctionProvider(answer)
    approver = PatternApprover(allow=[PatternRule(tool="send_file")])
    transport = MemoryTransport()
    router = Router(
        agent=Agent(provider, registry, Options(history=store, approver=approver)),
        store=store,
        transports={"memory": transport},
        policies={"memory": ChatPolicy(allowlist=frozenset({"user"}))},
        rate_limiter=RateLimiter((100, 1.0), {}, 100),
    )
    async with routing(router, transport):
        await transport.inject("the chart?")
        text, file = await transport.wait_sent(2)
        await settled(router)
    store.close()
    assert (text.text, file.text) == ("Here.", "Nov")
    assert file.attachment is not None and file.attachment.name == "chart.png"
    assert len(transport.sent) == 2 and len(provider.requests) == 2  # the turn ran once
