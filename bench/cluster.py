"""Several daemons on one PostgreSQL: does the work spread? For 1, 2 and 3 `rousseau run`
processes of this checkout sharing a throwaway PostgreSQL 15 (tests/postgres), Telegram by
long polling through the project's fake Bot API (one daemon elected to poll it), and its fake
OpenAI-compatible model answering each turn after 1 s: every chat sends its messages at once
(CHATS chats, EACH messages each), and each daemon runs two turns at a time
(`max_concurrent_turns: 2`). Prints, per daemon count:

- turns per second, from the first message pushed to the last first answer, and the
  speed-up over one daemon;
- the share of turns each daemon ran (its `rousseau_turn_seconds_count` on /metrics);
- messages lost (never answered), doubled (answered twice) and misordered (a chat's answers
  not in the order of its messages).

Target: 3 daemons run at least 2.5x the turns per second of 1, every daemon ran turns, and
nothing is lost, doubled or misordered.

    python bench/cluster.py [--chats 48] [--each 2] [--delay 1.0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.daemon import DaemonDied, Process  # noqa: E402
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
from tests.helpers import free_port  # noqa: E402
from tests.postgres.server import Postgres, postgres_bin  # noqa: E402

TURNS_EACH = 2
"""Turns each daemon runs at once (max_concurrent_turns)."""
FIRST_CHAT = 1000
TARGET_SPEEDUP = 2.5
IDLE = 0.05
"""A daemon whose CPU use stays under this share of a core for a second has started (its
model SDK, imported on a thread after it takes messages, costs a second or more)."""


class Failed(Exception):
    """A daemon died, or the cluster did not answer in time."""


def model(delay: float) -> Callable[[Recorded], Reply]:
    """Echoes the last message after `delay` seconds."""

    def answer(recorded: Recorded) -> Reply:
        content = recorded.body["messages"][-1]["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        completion = openai_completion(f"echo: {content}")
        reply: JSONReply | SSEReply = (
            openai_stream(completion) if recorded.body.get("stream") else JSONReply(completion)
        )
        return Sleep(delay, reply)

    return answer


class Member(Process):
    """One `rousseau run` of this checkout, with a folder of its own (lock, workspace, log)
    and its health server, whose /metrics counts its turns."""

    def __init__(self, root: Path, name: str, config: dict[str, Any]) -> None:
        self.folder = root / name
        self.folder.mkdir(parents=True)
        self.port = free_port()
        own = {
            **config,
            "state": {**config["state"], "path": str(self.folder / "state.db")},
            "agent": {"workspace": str(self.folder / "ws")},
            "health": {"listen": f"127.0.0.1:{self.port}"},
        }
        path = self.folder / "config.yaml"
        path.write_text(json.dumps(own))
        path.chmod(0o600)
        super().__init__(path, self.folder / "daemon.log", grace=30.0)

    def start(self) -> Member:  # type: ignore[override]
        super().start()
        return self

    def turns(self) -> int:
        """Turns this daemon ran, as its /metrics says."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("rousseau_turn_seconds_count"):
                    return int(float(line.split()[-1]))
        return 0

    def ready(self) -> bool:
        """Its server answers (/healthz would say 503 on a daemon not elected to poll)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=1):
                return True
        except OSError:
            return False


class Answers:
    """Every answer the fake Bot API took, by the text it echoes, and when the first came."""

    def __init__(self, telegram: FakeTelegram) -> None:
        self.telegram = telegram
        self.first: dict[str, float] = {}
        self.count: Counter[str] = Counter()
        self._cond = threading.Condition()
        telegram.on_sent = self._sent

    def _sent(self, sent: Sent) -> None:
        text = sent.text.removeprefix("echo: ")
        with self._cond:
            self.count[text] += 1
            self.first.setdefault(text, time.monotonic())
            self._cond.notify_all()

    def wait(self, texts: list[str], timeout: float, members: list[Member]) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while missing := [t for t in texts if t not in self.first]:
                for member in members:
                    member.check()
                if time.monotonic() > deadline:
                    raise Failed(f"{len(missing)} of {len(texts)} unanswered after {timeout} s")
                self._cond.wait(0.2)


@dataclass(kw_only=True, slots=True)
class Run:
    daemons: int
    turns: int
    seconds: float
    shares: list[int]
    """Turns each daemon ran."""
    lost: int
    doubled: int
    misordered: int
    """Chats whose answers came in another order than their messages."""

    @property
    def rate(self) -> float:
        return self.turns / self.seconds


def settle(telegram: FakeTelegram, members: list[Member]) -> None:
    """Wait until one daemon polls Telegram, and every daemon answers and is idle."""
    deadline = time.monotonic() + 60
    while not (telegram.first_called.get("getUpdates") and all(m.ready() for m in members)):
        for member in members:
            member.check()
        if time.monotonic() > deadline:
            raise Failed("the daemons were not ready within 60 s")
        time.sleep(0.05)
    used = [m.cpu_seconds() for m in members]
    while True:
        time.sleep(1.0)
        now = [m.cpu_seconds() for m in members]
        if all(b - a < IDLE for a, b in zip(used, now, strict=True)):
            return
        if time.monotonic() > deadline:
            raise Failed("the daemons were still busy 60 s after they started")
        used = now


def run(
    postgres: Postgres, llm: FakeLLMServer, root: Path, daemons: int, chats: int, each: int
) -> Run:
    telegram = FakeTelegram().start()
    members: list[Member] = []
    try:
        chat_ids = list(range(FIRST_CHAT, FIRST_CHAT + chats))
        config: dict[str, Any] = {
            "provider": "openai",
            "openai": {"api_key": "sk-bench", "base_url": llm.url + "/v1", "max_retries": 0},
            "telegram": {
                "token": telegram.token,
                "base_url": telegram.url,
                "allowlist": chat_ids,
                "streaming": "off",
            },
            "state": {"url": postgres.new_database()},
            "max_concurrent_turns": TURNS_EACH,
            "ratelimit": {"default": "1000/1s"},
            "log": {"format": "json", "level": "info"},
        }
        members = [Member(root / str(daemons), f"d{i}", config).start() for i in range(daemons)]
        settle(telegram, members)
        answers = Answers(telegram)
        sent = {chat: [f"{chat} m{n}" for n in range(each)] for chat in chat_ids}
        started = time.monotonic()
        for n in range(each):
            for chat in chat_ids:
                telegram.push(sent[chat][n], chat_id=chat, user_id=chat)
        texts = [text for chat in chat_ids for text in sent[chat]]
        answers.wait(texts, timeout=60 + 3 * len(texts) / (TURNS_EACH * daemons), members=members)
        seconds = max(answers.first.values()) - started
        time.sleep(1.0)  # an answer sent twice would show by now
        shares = [member.turns() for member in members]
        at = answers.first
        return Run(
            daemons=daemons,
            turns=len(texts),
            seconds=seconds,
            shares=shares,
            lost=sum(1 for t in texts if answers.count[t] == 0),
            doubled=sum(1 for t in texts if answers.count[t] > 1),
            misordered=sum(
                1
                for chat in chat_ids
                if any(at.get(a, 0) > at.get(b, 0) for a, b in itertools.pairwise(sent[chat]))
            ),
        )
    except (Failed, DaemonDied) as exc:
        logs = "\n".join(f"--- {m.folder.name}\n{m.tail(15)}" for m in members)
        raise Failed(f"{daemons} daemon(s): {exc}\n{logs}") from exc
    finally:
        for member in members:
            member.stop()
        telegram.stop()


def report(runs: list[Run]) -> bool:
    one = runs[0].rate
    print(
        f"{'daemons':>7} {'turns':>6} {'seconds':>8} {'turns/s':>8} {'speed-up':>9}"
        f"   {'share of turns per daemon':<28} {'lost':>4} {'doubled':>7} {'misordered':>10}"
    )
    for r in runs:
        total = sum(r.shares) or 1
        shares = " ".join(f"{100 * s / total:.0f}%" for s in r.shares)
        print(
            f"{r.daemons:>7} {r.turns:>6} {r.seconds:>8.1f} {r.rate:>8.2f} {r.rate / one:>8.2f}x"
            f"   {shares:<28} {r.lost:>4} {r.doubled:>7} {r.misordered:>10}"
        )
    last = runs[-1]
    checks = {
        f"{last.daemons} daemons run at least {TARGET_SPEEDUP}x the turns/s of 1": last.rate
        >= TARGET_SPEEDUP * one,
        "every daemon ran turns": all(all(r.shares) for r in runs),
        "none lost, none doubled, each chat in order": not any(
            r.lost or r.doubled or r.misordered for r in runs
        ),
    }
    for label, ok in checks.items():
        print(f"{label:<60} {'ok' if ok else 'MISSED'}")
    return all(checks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=48)
    parser.add_argument("--each", type=int, default=2, help="messages per chat")
    parser.add_argument("--delay", type=float, default=1.0, help="the model's seconds per turn")
    parser.add_argument("--daemons", type=int, default=3, help="runs 1 to this many")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stops what it started
    folder = postgres_bin()
    if folder is None:
        sys.exit("PostgreSQL 15 is not installed (or set ROUSSEAU_TEST_PG_BIN to its binaries)")
    postgres = Postgres(folder).start()
    llm = FakeLLMServer().start()
    llm.responder = model(args.delay)
    try:
        with tempfile.TemporaryDirectory(prefix="rousseau-bench-") as tmp:
            runs = [
                run(postgres, llm, Path(tmp), n, args.chats, args.each)
                for n in range(1, args.daemons + 1)
            ]
    except (Failed, DaemonDied) as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    finally:
        llm.stop()
        postgres.stop()
    print(
        f"{args.chats} chats x {args.each} messages, Telegram long polling, a {args.delay:g} s"
        f" model, {TURNS_EACH} turns at once per daemon, {os.cpu_count()} CPUs"
    )
    sys.exit(0 if report(runs) else 1)


if __name__ == "__main__":
    main()
