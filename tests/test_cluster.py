"""Several `rousseau run` daemons sharing one PostgreSQL (a real server, tests/postgres): the
fake Telegram (one poller, elected) and the fake Slack (events spread across every daemon's
connection), the fake model; daemons killed with kill -9 and restarted while messages flow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.faults.support import wait_progress, wait_until
from tests.helpers import ROUSSEAU, free_port
from tests.postgres.server import Postgres

LEASE = 3.0
# How long after a daemon's death the fakes may still be reading a request it wrote just
# before: the kernel holds the bytes, and the fake's thread takes them when it next runs.
IN_FLIGHT = 1.0
TELEGRAM_CHATS = range(1000, 1025)
SLACK_CHATS = [f"D{n:04d}" for n in range(25)]


def echo(recorded: Recorded) -> Reply:
    last = recorded.body["messages"][-1]["content"]
    return openai_stream(openai_completion(f"echo: {last}"))


class Member:
    """One daemon of the cluster, with a folder of its own (its lock and workspace)."""

    def __init__(self, root: Path, name: str, config: dict[str, Any], *, hook: bool = False):
        self.folder = root / name
        self.folder.mkdir(parents=True)
        self.config = self.folder / "config.yaml"
        own = {
            **config,
            "state": {**config["state"], "path": str(self.folder / "state.db")},
            "agent": {"workspace": str(self.folder / "ws")},
        }
        self.hook = ""
        """With `hook`: the address this daemon takes Telegram's posts at."""
        if hook:
            port = free_port()
            self.hook = f"http://127.0.0.1:{port}/telegram"
            webhook = {"url": "https://bot.example.org/telegram", "listen": f"127.0.0.1:{port}"}
            own["telegram"] = {**config["telegram"], "webhook": webhook}
        self.config.write_text(json.dumps(own))
        self.config.chmod(0o600)
        self.log = self.folder / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Member:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.folder)}
        if "PYTHONPATH" in os.environ:  # a checkout's code other than the installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*ROUSSEAU, "--config", str(self.config), "run"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


@pytest.fixture
def cluster_config(
    postgres: Postgres, fake_llm: FakeLLMServer
) -> Iterator[tuple[dict[str, Any], FakeTelegram, FakeSlack, str]]:
    fake_llm.responder = echo
    telegram, slack = FakeTelegram().start(), FakeSlack().start()
    slack.spread = True
    url = postgres.new_database()
    config = {
        "provider": "openai",
        "openai": {"api_key": "sk-test", "base_url": fake_llm.url + "/v1", "max_retries": 0},
        "telegram": {
            "token": telegram.token,
            "base_url": telegram.url,
            "allowlist": list(TELEGRAM_CHATS),
            "streaming": "off",
        },
        "slack": {
            "app_token": slack.app_token,
            "bot_token": slack.bot_token,
            "base_url": slack.url + "/api/",
            "allowlist": [f"U{c}" for c in SLACK_CHATS],
            "streaming": "off",
        },
        "state": {"url": url, "lease": f"{LEASE}s"},
        "cron": {"poll_interval": "1s"},
        "ratelimit": {"default": "1000/1s"},
        "shutdown_grace": "5s",
        "log": {"format": "json", "level": "info"},
    }
    yield config, telegram, slack, url
    telegram.stop()
    slack.stop()


def counts(got: list[tuple[str, int, float]], url: str) -> str:
    """What was answered and what the inbox says, for a failure's message."""
    by = {t: len({r[:2] for r in got if r[0].startswith(t)}) for t in ("telegram", "slack")}
    with psycopg.connect(url) as db:
        inbox = db.execute(
            "SELECT transport, status, claimed_by IS NULL, count(*) FROM inbox GROUP BY 1, 2, 3"
        ).fetchall()
        outbox = db.execute(
            "SELECT transport, status, count(*) FROM outbox GROUP BY 1, 2"
        ).fetchall()
        stuck = db.execute(
            "SELECT i.message_id, i.claimed_by, d.beat_at, i.received_at FROM inbox i"
            " LEFT JOIN daemons d ON d.id = i.claimed_by WHERE status = 'pending'"
            " ORDER BY received_at LIMIT 5"
        ).fetchall()
        claims = db.execute("SELECT * FROM session_claims").fetchall()
        daemons = db.execute("SELECT id, beat_at FROM daemons").fetchall()
    return (
        f"answered {by}; inbox {inbox}; outbox {outbox}; stuck {stuck}; claims {claims};"
        f" daemons {daemons} at {time.time()}"
    )


def poller_of(url: str) -> str | None:
    with psycopg.connect(url) as db:
        row = db.execute("SELECT daemon FROM pollers WHERE transport = 'telegram'").fetchone()
        return None if row is None else str(row[0])


async def every_five_seconds(url: str) -> None:
    """A cron job due every 5 s, told to the Telegram chat 1000."""
    from rousseau.cron import CronJobs
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_cron import PostgresCronJobs

    store = await PostgresStore.open(url)
    jobs = CronJobs(PostgresCronJobs(store))
    await jobs.add("tick", "@every 5s", "tick", "telegram:1000", timezone="UTC")
    await store.aclose()


def test_a_daemon_on_postgresql_answers_and_keeps_the_conversation(
    tmp_path: Path, cluster_config: tuple[dict[str, Any], FakeTelegram, FakeSlack, str]
) -> None:
    config, telegram, _, _ = cluster_config
    member = Member(tmp_path, "one", config).start()
    try:
        telegram.push("hello", chat_id=1000, user_id=1000)
        assert wait_until(lambda: telegram.visible(1000) == ["echo: hello"], timeout=30), (
            member.log.read_text()[-3000:]
        )
        assert member.stop() == 0
        member.start()
        telegram.push("again", chat_id=1000, user_id=1000)
        assert wait_until(lambda: len(telegram.visible(1000)) == 2, timeout=30)
        assert telegram.visible(1000) == ["echo: hello", "echo: again"]
    finally:
        if member.proc is not None and member.proc.poll() is None:
            member.kill()


def cli(member: Member, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [*ROUSSEAU, "--config", str(member.config), *args],
        env={"PATH": os.environ["PATH"], "HOME": str(member.folder)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done.stdout


def test_the_owner_runs_a_cluster_from_the_command_line(
    tmp_path: Path, cluster_config: tuple[dict[str, Any], FakeTelegram, FakeSlack, str]
) -> None:
    """status names the daemons and the Telegram poller; a stranger's code is approved with
    `pair`; cron and session commands read and write the shared store."""
    config, telegram, _, _ = cluster_config
    config["telegram"]["policy"] = "pairing"
    members = [Member(tmp_path, f"d{i}", config).start() for i in range(2)]
    try:
        telegram.push("hello", chat_id=1000, user_id=1000)
        assert wait_until(lambda: telegram.visible(1000) == ["echo: hello"], timeout=30)
        status = cli(members[0], "status")
        assert "cluster    2 daemons alive" in status, status
        assert "telegram  polled by " in status, status
        assert ": 1 sessions" in status
        telegram.push("let me in", chat_id=7, user_id=7)  # a stranger
        assert wait_until(lambda: bool(telegram.visible(7)), timeout=30)
        [code] = [line.split()[0] for line in cli(members[1], "pair", "list").splitlines()[1:]]
        assert code in telegram.visible(7)[0]
        assert "admitted telegram sender 7" in cli(members[1], "pair", "approve", code)
        telegram.push("thanks", chat_id=7, user_id=7)
        assert wait_until(lambda: telegram.visible(7)[-1:] == ["echo: thanks"], timeout=30)
        cli(
            members[0],
            *("cron", "add", "--name", "daily", "--schedule", "0 9 * * *", "--prompt", "news"),
            *("--deliver-to", "telegram:1000"),
        )
        assert "daily" in cli(members[1], "cron", "list")
        assert "disabled" in cli(members[1], "cron", "disable", "daily")
        listed = cli(members[1], "session", "list")
        assert "hello" in listed and "thanks" in listed
        assert "echo: thanks" in cli(members[0], "session", "search", "thanks")
        session = listed.splitlines()[1].split()[0]
        assert "messages" in cli(members[0], "session", "show", session[:6])
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            if member.proc is not None and member.proc.poll() is None:
                member.kill()


class Traffic:
    """2,000 messages from 50 chats (25 on Telegram, 25 on Slack) at about 80 a second,
    and every echo the platforms took."""

    TOTAL = 2000

    def __init__(self, telegram: FakeTelegram, slack: FakeSlack) -> None:
        self.telegram, self.slack = telegram, slack
        self.sent: dict[str, list[int]] = defaultdict(list)
        self.thread = threading.Thread(target=self._push, daemon=True)

    def _push(self) -> None:
        for i in range(self.TOTAL):
            chat = i % 50
            if chat < 25:
                user = TELEGRAM_CHATS[chat]
                self.telegram.push(f"m{i}", chat_id=user, user_id=user)
                self.sent[f"telegram:{user}"].append(i)
            else:
                channel = SLACK_CHATS[chat - 25]
                self.slack.message(f"m{i}", user=f"U{channel}", channel=channel)
                self.sent[f"slack:{channel}"].append(i)
            time.sleep(0.012)

    def replies(self) -> list[tuple[str, int, float]]:
        """Every echo the platforms took: (chat, number, when)."""
        out = [
            (f"telegram:{m.chat_id}", int(m.text.removeprefix("echo: m")), m.at)
            for m in list(self.telegram.sent)
            if m.text.startswith("echo: m")
        ]
        out += [
            (f"slack:{p.channel}", int(p.text.removeprefix("echo: m")), p.at)
            for p in list(self.slack.posted)
            if p.text.startswith("echo: m")
        ]
        return out

    def answered(self) -> int:
        return len({r[:2] for r in self.replies()})


def kill_twice(
    members: list[Member], telegram: FakeTelegram, url: str, hook: bool
) -> tuple[list[float], list[float]]:
    """Kill a daemon six seconds into the flow, restart it, and again: with polling the
    Telegram poller, with a webhook whichever took the last post. When each kill was, and
    (polling) how long the poller took to move."""
    moves: list[float] = []
    kills: list[float] = []
    for _ in range(2):
        time.sleep(6)
        before = poller_of(url)
        victim = next(
            m
            for m in members
            if (m.hook == telegram.posted_to[-1] if hook else f":{m.pid()}:" in str(before))
        )
        victim.kill()
        kills.append(time.time())
        killed = time.monotonic()
        if not hook:
            assert wait_until(lambda b=before: poller_of(url) not in (None, b), timeout=15)
            moves.append(time.monotonic() - killed)
        victim.start()
    return moves, kills


def check_once_in_order(traffic: Traffic, url: str, kills: list[float], logs: str) -> None:
    """Each chat's answers in order, each message answered by one turn (one outbox row).

    A part the platform took just before a kill, before it was recorded as sent, goes out
    again from the daemon that takes over: no platform lets a send be made idempotent, so
    that copy is allowed, and only where a kill came between the two (the fake stamps a
    request when it reads it, which can be just after the sender died). Slack sends an event
    again, seconds later and to another connection, when the one it went to was killed
    before acknowledging it: a Slack chat's answers keep the order its messages reached the
    cluster (a Telegram chat's, the order they were sent)."""
    got = traffic.replies()
    with psycopg.connect(url) as db:
        reached = dict(db.execute("SELECT text, received_at FROM inbox").fetchall())
        rows = Counter(
            t for (t,) in db.execute("SELECT text FROM outbox WHERE text LIKE 'echo: m%'")
        )
    for chat, numbers in traffic.sent.items():
        firsts = list(dict.fromkeys(n for c, n, _ in got if c == chat))
        if chat.startswith("slack:"):
            numbers = sorted(numbers, key=lambda n: reached[f"m{n}"])
        assert firsts == numbers, f"{chat}: {numbers} != {firsts}\n{logs}"
    assert set(rows.values()) == {1}, [t for t, n in rows.items() if n > 1]
    copies = Counter(r[:2] for r in got)
    for twice in [k for k, n in copies.items() if n > 1]:
        times = sorted(at for c, n, at in got if (c, n) == twice)
        assert any(times[0] - IN_FLIGHT < k < times[-1] for k in kills), (twice, times, kills)


def check_cron(telegram: FakeTelegram, url: str, elapsed: float, kills: int) -> None:
    """Each scheduled time ran once, none was missed for long, each finished run was told
    (once, but for what a kill cut in two)."""
    with psycopg.connect(url) as db:
        runs = db.execute("SELECT scheduled_at, status FROM cron_runs").fetchall()
    scheduled = [at for at, _ in runs]
    assert len(scheduled) == len(set(scheduled))
    assert len(scheduled) >= elapsed / 5 - 3
    ticks = [s for s in telegram.sent if s.chat_id == 1000 and "tick" in s.text]
    finished = [at for at, status in runs if status == "ok"]
    # Each finished run was told. A kill may fall after a run's reply was queued and before
    # the run was recorded finished, or between sending a reply and recording it sent (as
    # for the echoes): each kill may add at most one tick beyond the finished runs.
    assert len(finished) <= len(ticks) <= len(finished) + kills, (len(ticks), runs)
    assert len(runs) - len(finished) <= kills  # a kill cuts at most the run it ran


@pytest.mark.timeout(900)
@pytest.mark.parametrize("updates", ["polling", "webhook"])
def test_three_daemons_answer_every_message_once_in_order_through_two_kills(
    updates: str,
    tmp_path: Path,
    cluster_config: tuple[dict[str, Any], FakeTelegram, FakeSlack, str],
) -> None:
    """Telegram long polling runs on the elected daemon, which is the one killed; with a
    webhook, every daemon takes Telegram's posts (a balancer in front), and the one killed is
    whichever took the last."""
    config, telegram, slack, url = cluster_config
    hook = updates == "webhook"
    members = [Member(tmp_path, f"d{i}", config, hook=hook).start() for i in range(3)]
    telegram.balance = [m.hook for m in members if m.hook]
    traffic = Traffic(telegram, slack)
    try:
        slack.wait_connections(3, timeout=30)
        ready = (lambda: telegram.webhook is not None) if hook else (lambda: bool(poller_of(url)))
        assert wait_until(ready, timeout=30)
        anyio.run(every_five_seconds, url)
        started = time.monotonic()
        traffic.thread.start()
        moves, kills = kill_twice(members, telegram, url, hook)
        traffic.thread.join()
        elapsed = time.monotonic() - started
        # as long as answers keep coming: a loaded machine is slow, not wrong
        done = wait_progress(traffic.answered, Traffic.TOTAL, stall=60)
        time.sleep(2 * LEASE)  # anything sent twice would show by now
        logs = "\n".join(m.log.read_text()[-2000:] for m in members)
        assert done, f"{counts(traffic.replies(), url)}\n{logs}"
        check_once_in_order(traffic, url, kills, logs)
        assert max(moves, default=0) < 10, moves  # the poller moved to a live daemon in 10 s
        if hook:  # every daemon took posts
            assert {m.hook for m in members} <= set(telegram.posted_to)
        # A clean stop: what is queued goes out, nothing more runs. The Telegram poller stops
        # last: it alone sends Telegram's replies, and a tick queued after it stopped would
        # wait for the next start.
        poller = poller_of(url)
        for member in sorted(members, key=lambda m: f":{m.pid()}:" in str(poller)):
            assert member.stop() == 0
        check_cron(telegram, url, elapsed, len(kills))
    finally:
        for member in members:
            if member.proc is not None and member.proc.poll() is None:
                member.kill()


async def audited(url: str) -> None:
    from rousseau.agent.protocols import ToolCallRecord
    from rousseau.state.postgres import PostgresStore

    store = await PostgresStore.open(url)
    await store.record_tool_call(
        ToolCallRecord(
            session_id="s-pg",
            tool="bash",
            input_digest="d1g3st",
            decision="allow",
            decided_by="policy",
            reason="",
            started_at=time.time(),
            duration=0.1,
            outcome="ok",
        )
    )
    await store.aclose()


def test_commands_never_fall_back_to_a_local_file_when_the_state_is_postgresql(
    tmp_path: Path, cluster_config: tuple[dict[str, Any], FakeTelegram, FakeSlack, str]
) -> None:
    """audit and doctor read the shared store, where they had read a local file that no
    daemon sees (chat, send, mcp and import-go: tests/test_commands_postgresql.py)."""
    config, _, _, url = cluster_config
    member = Member(tmp_path, "cli", config)
    anyio.run(audited, url)
    assert "d1g3st" in cli(member, "audit")
    doctor = cli(member, "doctor", check=False)
    store = next(line for line in doctor.splitlines() if line.split()[1:2] == ["store"])
    assert store.split()[0] == "ok" and "PostgreSQL reachable: 0 sessions" in store, doctor
    assert not (member.folder / "state.db").exists()  # nothing went to a local store


def test_two_daemons_enforce_one_shared_budget(
    tmp_path: Path, cluster_config: tuple[dict[str, Any], FakeTelegram, FakeSlack, str]
) -> None:
    """Slack's events spread over both daemons' connections; each model call costs $1.00
    (10 prompt tokens at $100,000 a million), and the agent may spend $4 a day: four
    messages are answered, wherever they land, and every later one is refused."""
    from rousseau.costs import BUDGET_REPLY

    config, _, slack, url = cluster_config
    priced = {**config, "prices": {"gpt-4.1-mini": {"input": 100_000.0, "output": 0.0}}}
    members = [Member(tmp_path, f"b{i}", priced) for i in range(2)]
    for member in members:  # agent: is each member's own (its workspace): the budget joins it
        own = json.loads(member.config.read_text())
        own["agent"] = {**own["agent"], "budget": {"daily_usd": 4.0}}
        member.config.write_text(json.dumps(own))
        member.start()
    try:
        slack.wait_connections(2, timeout=30)
        channels = SLACK_CHATS[:8]
        for n, channel in enumerate(channels):  # one at a time: each call sees the last's cost
            slack.message(f"m{n}", user=f"U{channel}", channel=channel)
            assert wait_until(lambda c=channel: any(p.channel == c for p in slack.posted), 30), (
                "\n".join(m.log.read_text()[-2000:] for m in members)
            )
        replies = {p.channel: p.text for p in slack.posted}
        answered = [c for c in channels if replies[c].startswith("echo: ")]
        refused = [c for c in channels if replies[c] == BUDGET_REPLY]
        assert (answered, refused) == (channels[:4], channels[4:]), replies
        with psycopg.connect(url) as db:
            spent = db.execute(
                "SELECT usd, calls FROM spending_days WHERE agent = 'default' AND person = '*'"
            ).fetchone()
            people = db.execute(
                "SELECT count(*) FROM spending_days WHERE person LIKE 'slack:%'"
            ).fetchone()
        assert spent == (4.0, 4) and people == (4,)
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            if member.proc is not None and member.proc.poll() is None:
                member.kill()
