"""The daemon's inbox, outbox and chat map on both backends (SQLite's DaemonState, and
PostgreSQL's, which several daemons share), then what only the shared one does: claims that
two daemons never both hold, and a dead daemon's work taken over after its lease."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Message
from rousseau.cron.jobs import CronError, CronJobs
from rousseau.messages import Inbound, Outbound
from rousseau.state import Store
from rousseau.state.daemon_state import DaemonState, TransportState
from rousseau.state.records import MAX_PENDING_CODES
from rousseau.state.sqlite_cron import SqliteCronJobs
from tests.postgres.server import Postgres

pytestmark = pytest.mark.anyio


def inbound(n: int, chat: str = "42") -> Inbound:
    return Inbound(
        transport="telegram", chat_id=chat, sender_id=chat, message_id=str(n), text=f"m{n}"
    )


def part(text: str, chat: str = "42") -> Outbound:
    return Outbound(transport="telegram", chat_id=chat, text=text)


@pytest.fixture(params=["sqlite", "postgres"])
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        store = Store(tmp_path / "state.db")
        yield DaemonState(store)
        await store.aclose()
        return
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

    server: Postgres = request.getfixturevalue("postgres")
    pg = await PostgresStore.open(server.new_database())
    made = PostgresDaemonState(pg)
    await made.beat()
    yield made
    await pg.aclose()


async def test_an_inbound_is_accepted_once_and_pending_until_finished(state: Any) -> None:
    assert await state.accept(inbound(1)) is True
    assert await state.accept(inbound(1)) is False  # a redelivery
    assert await state.accept(inbound(2), ignored=True) is True
    assert [i.message_id for i in await state.pending()] == ["1"]
    await state.finish(inbound(1), [part("a"), part("b")])
    assert await state.pending() == []
    assert await state.outbox_pending() == 2
    assert await state.outbox_pending(["slack"]) == 0


async def test_the_outbox_keeps_each_chats_order_and_retries(state: Any) -> None:
    await state.finish(None, [part("a1", "A"), part("b1", "B"), part("a2", "A")])
    due = await state.due("telegram")
    assert [r.message.text for r in due] == ["a1", "b1", "a2"]
    assert [r.message.text for r in await state.due("telegram", skip=["A"])] == ["b1"]
    first = due[0]
    await state.retry_later(first.id, 60, "429", give_up=False)
    # a2 never overtakes a1, which waits for its retry; B goes on.
    assert [r.message.text for r in await state.due("telegram")] == ["b1"]
    await state.sent(due[1].id)
    assert await state.due("telegram") == []
    pending, soonest = await state.waiting("telegram")
    # a1's retry: a2, due but behind it, goes no sooner (a courier looking at once would spin)
    assert pending == 2 and soonest is not None and soonest > time.time() + 50
    assert await state.waiting("slack") == (0, None)
    # A chat that is being sent to counts, but its parts tell the courier no time to look.
    assert await state.waiting("telegram", skip=["A"]) == (2, None)
    assert await state.outbox_pending() == 2
    await state.retry_later(first.id, 0, "gone", give_up=True)
    assert [r.message.text for r in await state.due("telegram")] == ["a2"]


async def test_a_part_queued_before_the_clock_is_set_back_is_still_due(
    state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock set back an hour (NTP, an administrator) holds up no reply: the part
    queued just before is sent at once, and the chat's next one behind it."""
    await state.finish(None, [part("before")])
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    await state.finish(None, [part("after")])
    assert [r.message.text for r in await state.due("telegram")] == ["before", "after"]


async def test_a_chat_is_bound_to_its_session(state: Any) -> None:
    assert await state.session_for("telegram:42") is None
    await state.store.create_session("s1")
    await state.bind_session("telegram:42", "s1", owner="telegram:42", chat="telegram:42")
    assert await state.session_for("telegram:42") == "s1"
    await state.store.create_session("s2")
    await state.bind_session("telegram:42", "s2")
    assert await state.session_for("telegram:42") == "s2"


async def test_progress_tells_a_finished_turn_from_an_unfinished_one(state: Any) -> None:
    store = state.store
    await store.create_session("s")
    await state.accept(inbound(1))
    assert (await state.progress(inbound(1), "s")).appended is False
    await store.append_message("s", Message.user("m1"))
    await store.flush("s")
    await state.mark_appended(inbound(1), "s")
    await state.shown_preview(inbound(1), ["900"])
    progress = await state.progress(inbound(1), "s")
    assert (progress.appended, progress.done, progress.preview) == (True, None, ["900"])
    await store.append_message("s", Message.assistant("the answer"))
    await store.flush("s")
    assert (await state.progress(inbound(1), "s")).done == "the answer"


def transport_state(state: Any, name: str) -> Any:
    if isinstance(state, DaemonState):
        return TransportState(state.store, name)
    from rousseau.state.postgres_kv import PostgresTransportState

    return PostgresTransportState(state.store, name)


def cron(state: Any) -> Any:
    if isinstance(state, DaemonState):
        return SqliteCronJobs(state.store)
    from rousseau.state.postgres_cron import PostgresCronJobs

    return PostgresCronJobs(state.store)


async def test_a_stranger_gets_one_code_and_the_owner_decides(state: Any) -> None:
    grant = await state.pairing_code("telegram", "7", "7", "ABC123", ttl=600)
    assert grant is not None and (grant.code, grant.new) == ("ABC123", True)
    again = await state.pairing_code("telegram", "7", "7", "ZZZ999", ttl=600)
    assert again is not None and (again.code, again.new) == ("ABC123", False)
    assert [c.code for c in await state.pairing_codes()] == ["ABC123"]
    assert await state.is_allowed("telegram", "7") is False
    approved = await state.approve("abc123")  # any case
    assert approved is not None and approved.sender_id == "7"
    assert await state.is_allowed("telegram", "7") is True
    assert await state.approve("ABC123") is None  # used
    await state.pairing_code("telegram", "8", "8", "DEF456", ttl=600)
    assert (await state.reject("DEF456")) is not None
    assert await state.pairing_code("telegram", "8", "8", "GHI789", ttl=600) is None


async def test_past_the_limit_the_oldest_code_is_evicted(state: Any) -> None:
    for i in range(MAX_PENDING_CODES):
        await state.pairing_code("telegram", f"s{i}", f"s{i}", f"C{i:05d}", ttl=600)
    grant = await state.pairing_code("telegram", "new", "new", "NEWONE", ttl=600)
    assert grant is not None and grant.evicted is not None
    assert grant.evicted.code == "C00000"
    assert len(await state.pairing_codes()) == MAX_PENDING_CODES


async def test_transport_state_is_kept_per_transport(state: Any) -> None:
    matrix, slack = transport_state(state, "matrix"), transport_state(state, "slack")
    assert await matrix.get("token") is None
    await matrix.set("token", "t1")
    await matrix.set("token", "t2")
    assert await matrix.get("token") == "t2" and await slack.get("token") is None


async def test_cron_jobs_are_kept_and_each_time_runs_once(state: Any) -> None:
    store = cron(state)
    jobs = CronJobs(store)
    job = await jobs.add("daily", "0 9 * * *", "the news", "telegram:42", timezone="UTC")
    assert job.next_run_at is not None
    with pytest.raises(CronError, match="exists already"):
        await jobs.add("daily", "0 9 * * *", "again", "telegram:42")
    assert [j.name for j in await jobs.all()] == ["daily"]
    assert (await jobs.get(str(job.id))).name == "daily"
    first = await store.claim(job, 1000.0)
    assert first is not None
    assert await store.claim(job, 1000.0) is None  # claimed before: never run twice
    await store.finish(first, job, "ok", session_id="s1")
    [run] = await store.runs(job.id)
    assert (run.status, run.session_id, run.scheduled_at) == ("ok", "s1", 1000.0)
    assert (await jobs.get("daily")).last_status == "ok"
    await store.advance(job, 5000.0)
    assert (await jobs.get("daily")).next_run_at == 5000.0
    await jobs.remove("daily")
    with pytest.raises(CronError):
        await jobs.get("daily")


async def test_the_sweep_deletes_only_what_is_finished_and_old(state: Any) -> None:
    await state.accept(inbound(1))
    await state.accept(inbound(2))
    await state.finish(inbound(1), [part("a")])
    [row] = await state.due("telegram")
    await state.sent(row.id)

    class Ages:
        inbox = outbox = audit = cron_runs = 0.0
        compacted = None

    swept = await state.sweep(Ages(), now=time.time() + 10)
    assert (swept["inbox"], swept["outbox"]) == (1, 1)
    assert [i.message_id for i in await state.pending()] == ["2"]  # pending work stays


class Clock:
    """A wall clock the test moves: the daemons' beats and leases read it."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def pg_daemons(
    server: Postgres, lease: float = 30.0, clock: Clock | None = None
) -> tuple[Any, Any, Any]:
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

    pg = await PostgresStore.open(server.new_database())
    at = clock or time.time
    one = PostgresDaemonState(pg, lease=lease, clock=at)
    two = PostgresDaemonState(pg, lease=lease, clock=at)
    await one.beat()
    await two.beat()
    return pg, one, two


async def test_two_daemons_never_take_the_same_outbox_part(postgres: Postgres) -> None:
    pg, one, two = await pg_daemons(postgres)
    await one.finish(None, [part(f"p{i}", chat=str(i % 10)) for i in range(200)])
    taken: dict[str, list[int]] = {"one": [], "two": []}

    async def drain(name: str, daemon: Any) -> None:
        while rows := await daemon.due("telegram", limit=7):
            for row in rows:
                taken[name].append(row.id)
                await daemon.sent(row.id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, "one", one)
        tg.start_soon(drain, "two", two)
    assert sorted(taken["one"] + taken["two"]) == sorted(set(taken["one"] + taken["two"]))
    assert len(taken["one"]) + len(taken["two"]) == 200
    assert await one.outbox_pending() == 0
    await pg.aclose()


async def test_another_daemons_sending_gives_no_time_to_look(postgres: Postgres) -> None:
    pg, one, two = await pg_daemons(postgres)
    await one.finish(None, [part("first", chat="A"), part("second", chat="A")])
    await one.due("telegram", limit=1)  # `one` is sending A's first part
    # Both parts count; neither is `two`'s to take while `one` lives (the second waits for
    # the first), so `two` has no reason to look again soon.
    assert await two.waiting("telegram") == (2, None)
    pending, soonest = await one.waiting("telegram")
    assert pending == 2 and soonest is not None and soonest <= time.time()
    await pg.aclose()


async def test_a_dead_daemons_claims_are_taken_over_after_its_lease(postgres: Postgres) -> None:
    clock = Clock()
    pg, one, two = await pg_daemons(postgres, lease=30.0, clock=clock)
    await one.accept(inbound(1))
    await one.finish(None, [part("reply")])
    assert [r.message.text for r in await one.due("telegram")] == ["reply"]
    # While `one` beats, its inbound and its part are its own.
    assert await two.pending() == [] and await two.due("telegram") == []
    assert await two.pull(10) == [] and await one.pull(10) == []  # never one's own
    clock.advance(18)
    await one.beat()
    clock.advance(18)  # a lease after its first beat, not after its last
    await two.beat()
    assert await two.pending() == [] and await two.due("telegram") == []
    # `one` dies (no more beats): after the lease, `two` takes both over; not before.
    clock.advance(11)  # a second short of a lease after its last beat
    await two.beat()
    assert await two.pull(10) == [] and await two.due("telegram") == []
    clock.advance(2)
    await two.beat()
    assert [i.message_id for i in await two.pull(10)] == ["1"]
    assert await two.pull(10) == []  # now two's own
    assert [r.message.text for r in await two.due("telegram")] == ["reply"]
    await pg.aclose()


async def test_a_reply_to_a_web_page_stays_with_the_daemon_that_wrote_it(
    postgres: Postgres,
) -> None:
    """The page (or API call) waiting for it is connected to that daemon alone."""
    pg, one, two = await pg_daemons(postgres, lease=0.5)
    one.stays = two.stays = frozenset({"web"})
    await one.finish(None, [replace(part("to the page"), transport="web")])
    await two.finish(None, [part("to telegram")])
    assert await two.due("web") == []  # another daemon's page: never sent from here
    assert [r.message.text for r in await one.due("telegram")] == ["to telegram"]
    assert [r.message.text for r in await one.due("web")] == ["to the page"]
    await pg.aclose()


async def waiting_for_a_lock(url: str) -> None:
    """Wait until a session of `url`'s database waits for an advisory lock another holds."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        with anyio.fail_after(10):
            while True:
                cursor = await db.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
                row = await cursor.fetchone()
                if row and row[0]:
                    return
                await anyio.sleep(0.02)


async def test_a_message_is_taken_in_and_looked_for_in_its_chats_order(
    postgres: Postgres,
) -> None:
    """One daemon stalls while taking in a message (its commit late: a starved process);
    another daemon's message of the same chat, and its look for the chat's earlier
    messages, wait for that commit, so the later message is never answered first."""
    import psycopg

    pg, one, two = await pg_daemons(postgres)
    async with await psycopg.AsyncConnection.connect(pg.url) as stalled:
        async with stalled.transaction():  # what one's accept holds until it commits
            await stalled.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("telegram:42:",)
            )
            done = anyio.Event()

            async def take_in() -> None:
                await two.accept(inbound(2))
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(take_in)
                await waiting_for_a_lock(pg.url)  # for the stalled daemon's commit
                assert not done.is_set()
                tg.cancel_scope.cancel()
    assert await two.accept(inbound(2))
    await one.accept(inbound(1))
    async with await psycopg.AsyncConnection.connect(pg.url) as stalled:
        async with stalled.transaction():
            await stalled.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("telegram:42:",)
            )
            looked = anyio.Event()

            async def look() -> None:
                await two.earlier(inbound(3))
                looked.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(look)
                await waiting_for_a_lock(pg.url)  # the look waits too
                assert not looked.is_set()
                tg.cancel_scope.cancel()
    await pg.aclose()


async def test_a_part_never_overtakes_an_earlier_one_another_daemon_is_taking(
    postgres: Postgres,
) -> None:
    """Another daemon has the chat's first part locked, in the middle of taking it (not yet
    marked as its own): this daemon must not send the second meanwhile, or the two go out
    at once from two daemons and may arrive swapped."""
    import psycopg

    pg, one, two = await pg_daemons(postgres)
    await one.finish(None, [part("first"), part("second")])
    async with await psycopg.AsyncConnection.connect(pg.url) as other:
        async with other.transaction():  # a third daemon's `due`, before it commits
            await other.execute(
                "SELECT id FROM outbox WHERE text = 'first'"
                " AND pg_try_advisory_xact_lock(hashtextextended('outbox:telegram:42', 0))"
                " FOR UPDATE"
            )
            assert await two.due("telegram") == []
    assert [r.message.text for r in await two.due("telegram")] == ["first", "second"]
    await pg.aclose()


async def test_two_daemons_claim_a_cron_time_once(postgres: Postgres) -> None:
    from rousseau.state.postgres_cron import PostgresCronJobs

    pg, _, _ = await pg_daemons(postgres)
    one, two = PostgresCronJobs(pg), PostgresCronJobs(pg)
    job = await CronJobs(one).add("tick", "* * * * *", "tick", "telegram:42")
    claims = [await one.claim(job, 60.0 * i) for i in range(5)]
    claims += [await two.claim(job, 60.0 * i) for i in range(5)]
    assert sum(c is not None for c in claims) == 5
    await pg.aclose()


async def test_a_daemon_that_leaves_frees_its_claims_at_once(postgres: Postgres) -> None:
    pg, one, two = await pg_daemons(postgres)
    await one.accept(inbound(1))
    assert await two.pending() == []
    await one.leave()
    assert [i.message_id for i in await two.pending()] == ["1"]
    assert await one.accept(inbound(1)) is False  # still deduplicated across daemons
    await pg.aclose()


async def test_a_message_handed_over_is_pulled_with_its_chat_by_one_daemon(
    postgres: Postgres,
) -> None:
    """A daemon with no free turn slot hands messages over; a daemon pulls the waiting
    messages of whole chats, the chat waiting longest first, never of a chat another live
    daemon works on."""
    pg, one, two = await pg_daemons(postgres)
    await one.accept(inbound(1))  # one answers it: chat 42 is one's
    for n, chat in ((2, "42"), (3, "7"), (4, "8"), (5, "7")):
        await one.accept(inbound(n, chat=chat))
        await one.hand_over(inbound(n, chat=chat))
    assert [i.message_id for i in await two.pull(1)] == ["3", "5"]  # chat 7, all of it
    assert [i.message_id for i in await two.pull(5)] == ["4"]  # 42 is one's to answer
    assert await two.pull(5) == []
    assert [i.message_id for i in await one.pull(5)] == ["2"]  # its own chat's
    assert await one.pull(5) == []
    await one.finish(inbound(1), [part("a1")])
    await one.finish(inbound(2), [part("a2")])
    await one.accept(inbound(6))
    await one.hand_over(inbound(6))
    assert [i.message_id for i in await two.pull(5)] == ["6"]  # nobody works on 42 now
    await pg.aclose()


async def test_daemons_pulling_at_once_take_each_chat_once(postgres: Postgres) -> None:
    pg, one, two = await pg_daemons(postgres)
    for n in range(60):
        await one.accept(inbound(n, chat=str(n % 20)))
        await one.hand_over(inbound(n, chat=str(n % 20)))
    taken: dict[str, list[Inbound]] = {"one": [], "two": []}

    async def drain(name: str, daemon: Any) -> None:
        while pulled := await daemon.pull(3):
            taken[name] += pulled

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, "one", one)
        tg.start_soon(drain, "two", two)
    ids = [i.message_id for i in taken["one"] + taken["two"]]
    assert sorted(ids, key=int) == [str(n) for n in range(60)]  # each once
    chats = [{i.chat_id for i in taken[name]} for name in ("one", "two")]
    assert not chats[0] & chats[1]  # each chat went to one daemon
    await pg.aclose()


async def test_a_pull_locks_only_the_chats_it_takes(postgres: Postgres) -> None:
    """Were every waiting chat locked by one daemon's pull, another pulling at the same time
    would find none to take, and stop looking."""
    pg, one, two = await pg_daemons(postgres)
    for n in range(20):
        await one.accept(inbound(n, chat=str(n)))
        await one.hand_over(inbound(n, chat=str(n)))
    held: list[int] = []
    transaction = pg.transaction

    @asynccontextmanager
    async def counted() -> AsyncIterator[Any]:
        async with transaction() as db:
            yield db
            cursor = await db.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid()"
            )
            row = await cursor.fetchone()
            held.append(row[0])

    pg.transaction = counted  # type: ignore[method-assign]
    assert [i.message_id for i in await two.pull(2)] == ["0", "1"]
    assert held == [2]
    await pg.aclose()


async def test_a_daemon_hears_of_work_handed_over_and_of_replies_for_it_to_send(
    postgres: Postgres,
) -> None:
    """Handed-over messages wake every daemon; a reply of a transport one daemon is elected
    for, queued on another, wakes the elected one's courier (its own replies, it wakes
    itself)."""
    pg, one, two = await pg_daemons(postgres)
    one.elected = two.elected = frozenset({"telegram"})
    heard: list[str] = []
    news = anyio.Event()

    def hear(what: str) -> None:
        nonlocal news
        heard.append(what)
        news.set()

    async def until(what: str) -> None:
        nonlocal news
        with anyio.fail_after(10):
            while what not in heard:
                news = anyio.Event()
                await news.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(two.listen, lambda: hear("work"), hear)
        await until("work")  # on connecting: what was said while not listening
        heard.clear()
        await one.accept(inbound(1))
        await one.hand_over(inbound(1))
        await until("work")
        async with two.polling("telegram"):
            heard.clear()
            await one.finish(None, [part("from one")])
            await until("telegram")
            heard.clear()
            await two.finish(None, [part("two's own")])
            await one.leave()  # frees its claims: the others are told
            await until("work")
            assert heard == ["work"]  # nothing said of two's own reply, before
        tg.cancel_scope.cancel()
    await pg.aclose()


async def test_one_daemon_polls_a_transport_and_another_takes_over_when_it_goes(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rousseau.state import postgres_daemon

    pg, one, two = await pg_daemons(postgres)
    order: list[str] = []
    tries: list[bool] = []
    try_lock = postgres_daemon._try_lock

    async def counted(conn: Any, key: str) -> bool:
        got = await try_lock(conn, key)
        tries.append(got)
        return got

    monkeypatch.setattr(postgres_daemon, "_try_lock", counted)

    async def poll(name: str, daemon: Any, hold: anyio.Event) -> None:
        async with daemon.polling("telegram"):
            order.append(name)
            await hold.wait()

    first, second = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(poll, "one", one, first)
        with anyio.fail_after(10):
            while order != ["one"]:
                await anyio.sleep(0.02)
        tg.start_soon(poll, "two", two, second)
        with anyio.fail_after(10):
            while False not in tries:  # two tried, and was refused
                await anyio.sleep(0.02)
        assert order == ["one"]  # two waits while one holds it
        assert (await one.pollers())["telegram"] == one.id
        first.set()  # one lets go (as a dead daemon's connection does)
        with anyio.fail_after(5):
            while order != ["one", "two"]:
                await anyio.sleep(0.1)
        assert (await two.pollers())["telegram"] == two.id
        second.set()
    await pg.aclose()


async def test_holding_a_session_the_chats_earlier_messages_come_first(
    postgres: Postgres,
) -> None:
    pg, one, two = await pg_daemons(postgres)
    await one.accept(inbound(1))
    await two.accept(inbound(2))
    await one.accept(inbound(3, chat="other"))
    async with two.session_claimed("telegram:42"):
        assert [i.message_id for i in await two.earlier(inbound(2))] == ["1"]
        assert await two.unanswered(inbound(2)) is True
        await two.finish(inbound(1), [part("a1")])
        await two.finish(inbound(2), [part("a2")])
    # `one` took 1 in: holding the session in its turn, it finds it answered.
    async with one.session_claimed("telegram:42"):
        assert await one.earlier(inbound(1)) == []
        assert await one.unanswered(inbound(1)) is False
    await pg.aclose()


async def test_a_session_is_held_by_one_daemon_at_a_time(postgres: Postgres) -> None:
    pg, one, two = await pg_daemons(postgres)
    events: list[str] = []
    refused, done = anyio.Event(), anyio.Event()
    claim = two._claim_session

    async def counted(session_key: str) -> bool:
        got = await claim(session_key)
        if not got:
            refused.set()
        return bool(got)

    two._claim_session = counted

    async def turn(name: str, daemon: Any) -> None:
        async with daemon.session_claimed("telegram:42"):
            events.append(f"{name} in")
            if name == "one":
                await done.wait()
            events.append(f"{name} out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "one", one)
        with anyio.fail_after(10):
            while events != ["one in"]:
                await anyio.sleep(0.02)
            tg.start_soon(turn, "two", two)
            await refused.wait()  # two asked for the session, and waits for it
        done.set()
    assert events == ["one in", "one out", "two in", "two out"]
    await pg.aclose()


async def test_an_approval_asked_on_one_daemon_is_answered_on_another(
    postgres: Postgres,
) -> None:
    from rousseau.agent import ApprovalRequest, ToolUse
    from rousseau.approvals import ChatApprovals

    pg, one, two = await pg_daemons(postgres)
    told: list[str] = []

    async def notify(transport: str, chat: str, text: str, buttons: tuple[str, ...] = ()) -> int:
        told.append(text)
        return 1

    asker = ChatApprovals(owners=["telegram:1"], timeout=20, notify=notify)
    other = ChatApprovals(owners=["telegram:1"], timeout=20, notify=notify)
    asker.relay, other.relay = one.approvals(), two.approvals()
    request = ApprovalRequest(
        session_id="s", tool_use=ToolUse(id="t", name="bash", input={"command": "ls"})
    )
    decisions = []

    async def ask() -> None:
        decisions.append(await asker.ask(request))

    def answer(text: str, sender: str = "1") -> Inbound:
        return Inbound(
            transport="telegram", chat_id=sender, sender_id=sender, message_id=text, text=text
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(asker.hear)
        tg.start_soon(ask)
        with anyio.fail_after(10):
            while not told:
                await anyio.sleep(0.05)
        code = told[0].split("[")[1].split("]")[0]
        assert not other.is_answer(f"yes {code}")  # not its own request...
        assert await other.knows(f"yes {code}")  # ...but one it can answer
        assert await other.knows("yes ZZZZ") is False
        assert "Only an owner" in await other.settle(answer(f"yes {code}", sender="2"))
        assert await other.settle(answer(f"yes {code}")) == f"Approved {code}."
        with anyio.fail_after(10):
            while not decisions:
                await anyio.sleep(0.05)
        assert "no approval" in await other.settle(answer(f"no {code}"))  # settled, and gone
        tg.cancel_scope.cancel()
    [decision] = decisions
    assert decision.allow and decision.by == "owner telegram:1"
    await pg.aclose()


async def test_a_daemon_whose_clock_is_set_back_is_not_taken_for_dead(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

    pg = await PostgresStore.open(postgres.new_database())
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)  # one's host: an hour behind
    one = PostgresDaemonState(pg, lease=30.0)
    await one.beat()
    assert await one.accept(inbound(1)) is True  # one answers it
    monkeypatch.setattr(time, "time", real)  # two's host: right
    two = PostgresDaemonState(pg, lease=30.0)
    await two.beat()
    assert await two.pull(10) == []  # one lives: its message is not taken from it
    assert abs(one.clock() - two.clock()) < 5  # both read the database's clock
    await pg.aclose()
