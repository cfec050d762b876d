"""The whole daemon as a user runs it: `rousseau run` in a process of its own, polling the
project's fake Bot API and answered by its fake OpenAI-compatible model, both served on
127.0.0.1 by this process. Prints one table of figures against their targets:

- start: from spawning `rousseau run` to its first getUpdates, on a new state directory (the
  database created and migrated) and, at the end, restarted on the state the run left: the
  median of RESTARTS starts (what a daemon mostly does; one start alone varies by a third);
- idle RSS, 5 s after that, and the CPU it spent from 2 to 5 s (no message yet);
- reply latency (update pushed to sendMessage received) with a zero-latency model: median
  and p90 of 20 sequential messages in one chat, after one cold first message;
- 50 chats at once on a 1 s model: time until all are answered;
- closed loop on a zero-latency model: 20 chats each sending its next message as soon as
  its last is answered, 25 each: messages/s, whether all 500 were answered exactly once,
  and the daemon's CPU (user + system, from /proc) per message;
- RSS after all that;
- then, the daemon stopped, the two SDKs on its path alone (bench/libraries.py): their CPU per
  message and what importing them costs, and the daemon's CPU per message less theirs;
- and what the meter costs a model call (rousseau.costs: its cost recorded in the store, and
  with `agent.budget` the limits checked first), on a SQLite store in this process.

Every model call's cost is recorded whatever the config; `--budget` also sets loose limits
(never reached), so every call is checked against them first: the whole path's price of
budgets, beside the figures of a run without.

The config is a fresh one but for a per-sender rate limit loose enough for the load.
`--json PATH` also writes the figures, to compare a run with an earlier one.

    python bench/daemon.py [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import libraries  # noqa: E402
from tests.fakes.llm import (  # noqa: E402
    FakeLLMServer,
    JSONReply,
    Recorded,
    Reply,
    Sleep,
    SSEReply,
    openai_completion,
    openai_stream,
)
from tests.fakes.telegram import FakeTelegram, Sent  # noqa: E402

LATENCY_CHAT = 100
BURST_CHATS = range(200, 250)
LOOP_CHATS = range(300, 320)
LOOP_EACH = 25
RESTARTS = 5
TICK = os.sysconf("SC_CLK_TCK")


class DaemonDied(Exception):
    """`rousseau run` exited before the benchmark was done."""


class Model:
    """Echoes the last message after `delay` seconds, which each phase sets."""

    def __init__(self) -> None:
        self.delay = 0.0

    def __call__(self, recorded: Recorded) -> Reply:
        content = recorded.body["messages"][-1]["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        completion = openai_completion(f"echo: {content}")
        reply: JSONReply | SSEReply = (
            openai_stream(completion) if recorded.body.get("stream") else JSONReply(completion)
        )
        return Sleep(self.delay, reply) if self.delay else reply


class Process:
    """`rousseau run` of this checkout (`-m rousseau` from its root) on `config`, its log in
    `log`: what every bench that runs daemons needs of one."""

    def __init__(self, config: Path, log: Path, *, grace: float = 10.0) -> None:
        self.config = config
        self.log = log
        self.grace = grace
        """How long a stop waits after SIGTERM before it kills."""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Spawn it; returns when (time.monotonic()) it was spawned."""
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.config.parent)}
        with self.log.open("ab") as log:
            started = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rousseau", "--config", str(self.config), "run"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return started

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise DaemonDied(f"rousseau run exited with status {self.proc.returncode}")

    def cpu_seconds(self) -> float:
        """User and system time of all its threads so far."""
        self.check()
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    def cpu_seconds_fine(self) -> float:
        """Time on a CPU of its live threads, to the nanosecond (the ticks of cpu_seconds
        are too coarse for an idle daemon's few milliseconds a second)."""
        self.check()
        total = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
                pass
        return total / 1e9

    def rss_mib(self) -> float:
        self.check()
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise DaemonDied("no VmRSS for the daemon")

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Daemon(Process):
    """`rousseau run` against the fakes, its state and log in `tmp`."""

    def __init__(
        self, tmp: Path, telegram: FakeTelegram, llm: FakeLLMServer, *, budget: bool = False
    ) -> None:
        chats = [LATENCY_CHAT, *BURST_CHATS, *LOOP_CHATS]
        agent: dict[str, object] = {"workspace": str(tmp / "ws")}
        if budget:  # checked before every call, never reached
            agent["budget"] = {"daily_usd": 1e9, "per_sender_daily_usd": 1e9}
        config = tmp / "config.yaml"
        config.write_text(
            json.dumps(
                {
                    "provider": "openai",
                    "openai": {"api_key": "sk-bench", "base_url": llm.url + "/v1"},
                    "telegram": {
                        "token": telegram.token,
                        "base_url": telegram.url,
                        "allowlist": chats,
                    },
                    "state": {"path": str(tmp / "state.db")},
                    "agent": agent,
                    "ratelimit": {"default": "1000/1s"},
                }
            )
        )
        config.chmod(0o600)
        super().__init__(config, tmp / "daemon.log")


class Replies:
    """What the bot sent, keyed by the message it answers; `then` is called with the chat
    of each message answered for the first time, in the fake Bot API's thread."""

    def __init__(self, telegram: FakeTelegram, daemon: Daemon) -> None:
        self.telegram = telegram
        self.daemon = daemon
        self.at: dict[str, float] = {}
        """Message text -> when (time.monotonic()) its first reply arrived."""
        self.count: Counter[str] = Counter()
        self.then: Callable[[int], None] | None = None
        self._cond = threading.Condition()
        telegram.on_sent = self._sent

    def _sent(self, sent: Sent) -> None:
        now = time.monotonic()
        text = sent.text.removeprefix("echo: ")
        with self._cond:
            self.count[text] += 1
            first = text not in self.at
            if first:
                self.at[text] = now
            self._cond.notify_all()
        if first and self.then is not None:
            self.then(sent.chat_id)

    def send(self, chat: int, text: str) -> float:
        """Push a message from a private chat; returns when it was pushed."""
        pushed = time.monotonic()
        self.telegram.push(text, chat_id=chat, user_id=chat)
        return pushed

    def wait(self, texts: Collection[str], timeout: float) -> float:
        """Wait until every one of `texts` is answered; returns when the last one was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while missing := [t for t in texts if t not in self.at]:
                self.daemon.check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{len(missing)} of {len(texts)} unanswered after {timeout} s"
                    )
                self._cond.wait(min(0.2, left))
            return max(self.at[t] for t in texts)


@dataclass(kw_only=True, slots=True)
class Figure:
    key: str
    """Its name in the JSON."""
    label: str
    value: float | bool
    unit: str = ""
    target: float | bool | None = None
    """None when there is no target."""
    at_least: bool = False
    """The target is a floor, not a ceiling."""

    def shown(self, value: float | bool) -> str:
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return f"{value:.3g} {self.unit}".strip() if value < 1000 else f"{value:.0f} {self.unit}"

    def met(self) -> str:
        if self.target is None:
            return ""
        if isinstance(self.target, bool):
            return "ok" if self.value == self.target else "MISSED"
        ok = self.value >= self.target if self.at_least else self.value <= self.target
        return "ok" if ok else "MISSED"

    def row(self) -> str:
        target = ""
        if isinstance(self.target, bool):
            target = self.shown(self.target)
        elif self.target is not None:
            target = ("≥ " if self.at_least else "≤ ") + self.shown(self.target)
        row = f"{self.label:<44} {self.shown(self.value):>12}   {target:<12} {self.met()}"
        return row.rstrip()


def wait_first_poll(telegram: FakeTelegram, daemon: Daemon) -> float:
    deadline = time.monotonic() + 30
    while (at := telegram.first_called.get("getUpdates")) is None:
        daemon.check()
        if time.monotonic() > deadline:
            raise TimeoutError("no getUpdates within 30 s")
        time.sleep(0.005)
    return at


def restarts(telegram: FakeTelegram, daemon: Daemon) -> list[float]:
    """Stop the daemon and start it again on the same state, RESTARTS times: each start's
    time to its first getUpdates."""
    times = []
    for _ in range(RESTARTS):
        daemon.stop()
        telegram.first_called.pop("getUpdates", None)
        spawned = daemon.start()
        times.append(wait_first_poll(telegram, daemon) - spawned)
    return times


def latency(replies: Replies) -> tuple[float, list[float]]:
    """The cold first reply, then 20 sequential ones: each in seconds from push to reply."""
    times = []
    for i in range(21):
        text = f"latency {i}"
        pushed = replies.send(LATENCY_CHAT, text)
        times.append(replies.wait([text], timeout=30) - pushed)
    return times[0], times[1:]


def burst(replies: Replies) -> float:
    texts = {chat: f"burst {chat}" for chat in BURST_CHATS}
    started = time.monotonic()
    for chat, text in texts.items():
        replies.send(chat, text)
    return replies.wait(list(texts.values()), timeout=60) - started


@dataclass(kw_only=True, slots=True)
class Loop:
    rate: float
    """Messages answered per second."""
    once: bool
    """Every message was answered, exactly once."""
    cpu: float
    """The daemon's CPU seconds per message answered."""
    own_cpu: float
    """This process's (the fakes') CPU seconds per message answered."""


def closed_loop(replies: Replies, daemon: Daemon) -> Loop:
    sent = dict.fromkeys(LOOP_CHATS, 1)

    def next_message(chat: int) -> None:
        if chat in sent and sent[chat] < LOOP_EACH:
            replies.send(chat, f"loop {chat} {sent[chat]}")
            sent[chat] += 1

    texts = [f"loop {chat} {i}" for chat in LOOP_CHATS for i in range(LOOP_EACH)]
    cpu, own = daemon.cpu_seconds(), time.process_time()
    replies.then = next_message
    started = time.monotonic()
    for chat in LOOP_CHATS:
        replies.send(chat, f"loop {chat} 0")
    try:
        done = replies.wait(texts, timeout=60)
    except TimeoutError:  # reported as a rate over what was answered, and not all answered
        done = time.monotonic()
    cpu, own = daemon.cpu_seconds() - cpu, time.process_time() - own
    replies.then = None
    time.sleep(0.2)  # a duplicate would show up by now
    answered = sum(1 for t in texts if t in replies.at)
    return Loop(
        rate=answered / (done - started),
        once=all(replies.count[t] == 1 for t in texts),
        cpu=cpu / max(1, answered),
        own_cpu=own / max(1, answered),
    )


def measure(telegram: FakeTelegram, model: Model, daemon: Daemon) -> list[Figure]:
    replies = Replies(telegram, daemon)
    spawned = daemon.start()
    start = wait_first_poll(telegram, daemon) - spawned
    time.sleep(max(0.0, spawned + start + 2 - time.monotonic()))
    idle_cpu, idle_from = daemon.cpu_seconds_fine(), time.monotonic()
    time.sleep(max(0.0, spawned + start + 5 - time.monotonic()))
    idle_cpu = (daemon.cpu_seconds_fine() - idle_cpu) / (time.monotonic() - idle_from)
    idle_rss = daemon.rss_mib()
    cold, warm = latency(replies)
    model.delay = 1.0
    burst_s = burst(replies)
    model.delay = 0.0
    loop = closed_loop(replies, daemon)
    rss_after = daemon.rss_mib()
    restarted = statistics.median(restarts(telegram, daemon))
    messages = len(LOOP_CHATS) * LOOP_EACH
    return [
        Figure(
            key="start_s",
            label="start to first getUpdates, new database",
            value=start,
            unit="s",
            target=0.5,
        ),
        Figure(
            key="restart_s",
            label=f"the same, restarted: median of {RESTARTS}",
            value=restarted,
            unit="s",
            target=0.5,
        ),
        Figure(
            key="idle_rss_mib", label="idle RSS 5 s later", value=idle_rss, unit="MiB", target=64
        ),
        Figure(
            key="idle_cpu_ms_per_s",
            label="idle CPU, seconds 2 to 5 after start",
            value=idle_cpu * 1000,
            unit="ms/s",
        ),
        Figure(key="first_reply_ms", label="first reply (cold)", value=cold * 1000, unit="ms"),
        Figure(
            key="reply_p50_ms",
            label="reply latency, 0 s model: median of 20",
            value=statistics.median(warm) * 1000,
            unit="ms",
        ),
        Figure(
            key="reply_p90_ms",
            label="reply latency, 0 s model: p90 of 20",
            value=statistics.quantiles(warm, n=10)[8] * 1000,
            unit="ms",
        ),
        Figure(
            key="burst_50_s",
            label=f"{len(BURST_CHATS)} chats at once, 1 s model: all answered",
            value=burst_s,
            unit="s",
            target=1.3,
        ),
        Figure(
            key="closed_loop_msg_per_s",
            label=f"closed loop, {len(LOOP_CHATS)} chats x {LOOP_EACH}: messages/s",
            value=loop.rate,
            unit="/s",
            target=300,
            at_least=True,
        ),
        Figure(
            key="closed_loop_answered_once",
            label=f"closed loop: all {messages} answered exactly once",
            value=loop.once,
            target=True,
        ),
        Figure(
            key="cpu_ms_per_msg",
            label="daemon CPU per message (closed loop)",
            value=loop.cpu * 1000,
            unit="ms",
            target=2,
        ),
        Figure(
            key="fakes_cpu_ms_per_msg",
            label="the fakes' CPU per message (this process)",
            value=loop.own_cpu * 1000,
            unit="ms",
        ),
        Figure(key="rss_after_mib", label="RSS after load", value=rss_after, unit="MiB"),
    ]


def report(figures: list[Figure], json_path: Path | None) -> None:
    load = os.getloadavg()
    print(
        f"rousseau run, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
        f" load average {load[0]:.2f} at the end"
    )
    print(f"{'figure':<44} {'value':>12}   target")
    for figure in figures:
        print(figure.row())
    if json_path is not None:
        json_path.write_text(
            json.dumps(
                {
                    "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_average": load[0],
                    "figures": {f.key: f.value for f in figures},
                },
                indent=2,
            )
            + "\n"
        )


def alone(telegram: FakeTelegram, llm: FakeLLMServer, daemon_cpu_ms: float) -> list[Figure]:
    """The two SDKs on the daemon's path measured alone (bench/libraries.py), and what is left
    of the daemon's CPU per message for everything else: rousseau, asyncio, logging."""
    sdk = libraries.measure(telegram, llm.url)
    ptb, openai, both = sdk["python-telegram-bot"], sdk["openai"], sdk["both"]
    return [
        Figure(
            key="ptb_cpu_ms_per_msg",
            label="python-telegram-bot alone: CPU per message",
            value=ptb["cpu_ms_per_msg"],
            unit="ms",
        ),
        Figure(
            key="openai_cpu_ms_per_msg",
            label="openai SDK alone: CPU per streamed reply",
            value=openai["cpu_ms_per_msg"],
            unit="ms",
        ),
        Figure(
            key="rest_cpu_ms_per_msg",
            label="daemon CPU per message less the two",
            value=daemon_cpu_ms - ptb["cpu_ms_per_msg"] - openai["cpu_ms_per_msg"],
            unit="ms",
        ),
        Figure(
            key="ptb_import_s",
            label="python-telegram-bot + aiohttp: import alone",
            value=ptb["import_s"],
            unit="s",
        ),
        Figure(
            key="sdks_import_mib",
            label="both SDKs imported alone: RSS added",
            value=both["import_mib"],
            unit="MiB",
        ),
    ]


def metering(calls: int = 5000) -> list[Figure]:
    """The meter's CPU per model call, as the daemon makes it: the call's cost recorded on the
    store's writer, and (with a budget) the spending read back before the next call."""
    import anyio

    from rousseau.agent import Usage
    from rousseau.config.sections import BudgetConfig
    from rousseau.costs import Meter, Payer, Prices
    from rousseau.cron.schedule import zone
    from rousseau.state import Store
    from rousseau.state.sqlite_spending import SqliteSpending

    usage = Usage(input_tokens=1200, output_tokens=300, cache_read_tokens=800)

    async def measure(budget: bool) -> float:
        with tempfile.TemporaryDirectory(prefix="rousseau-meter-") as tmp:
            store = Store(Path(tmp) / "state.db")
            budgets = {"default": BudgetConfig(daily_usd=1e9)} if budget else {}
            meter = Meter(
                SqliteSpending(store),
                prices=Prices(),
                budgets=budgets,
                zone=zone("UTC"),
                remember=60.0,  # as the daemon's on SQLite (rousseau.assembly.models)
            )
            payer = Payer(person="telegram:42", session_id="s")
            for _ in range(50):  # warm: the statements prepared, the price looked up
                await meter.check(payer)
                await meter.record(payer, "s", "gpt-4.1-mini", usage, "openai")
            await store.flush()
            started = time.process_time()  # every thread of this process: the writer's too
            for _ in range(calls):
                await meter.check(payer)
                await meter.record(payer, "s", "gpt-4.1-mini", usage, "openai")
            await store.flush()
            spent = time.process_time() - started
            store.close()
        return spent / calls

    recorded = anyio.run(measure, False)
    checked = anyio.run(measure, True)
    return [
        Figure(
            key="meter_record_ms_per_call",
            label="meter: a call's cost recorded, CPU",
            value=recorded * 1000,
            unit="ms",
            target=0.1,
        ),
        Figure(
            key="meter_budget_ms_per_call",
            label="meter: with a budget checked first, CPU",
            value=checked * 1000,
            unit="ms",
            target=0.1,
        ),
    ]


def run(json_path: Path | None, *, budget: bool = False) -> int:
    telegram = FakeTelegram().start()
    llm = FakeLLMServer().start()
    model = Model()
    llm.responder = model
    try:
        with tempfile.TemporaryDirectory(prefix="rousseau-bench-") as tmp:
            daemon = Daemon(Path(tmp), telegram, llm, budget=budget)
            try:
                figures = measure(telegram, model, daemon)
            except (DaemonDied, TimeoutError) as exc:
                print(f"{exc}; the end of its log:\n{daemon.tail()}", file=sys.stderr)
                return 1
            finally:
                daemon.stop()
        cpu = next(f.value for f in figures if f.key == "cpu_ms_per_msg")
        figures += alone(telegram, llm, float(cpu))
        figures += metering()
    finally:
        telegram.stop()
        llm.stop()
    report(figures, json_path)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument(
        "--budget", action="store_true", help="with agent.budget set (checked, never reached)"
    )
    args = parser.parse_args()
    # A terminated benchmark still stops the daemon it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(run(args.json, budget=args.budget))


if __name__ == "__main__":
    main()
