"""The daemon under load: Telegram (python-telegram-bot against a fake Bot API in another
process) into the router, a zero-latency model, replies back out through the outbox.

Prints messages per second, p50/p99 added latency (update available -> reply received by the
Bot API; at 100 messages/s in bursts of 10, then evenly paced by the fake) and RSS before and
after. Targets on a 2-core machine: >= 300 messages/s across 100 chats; p99 added latency
< 50 ms at 100 messages/s; RSS growth < 10% over 20,000 messages; with a 1 s model, 100
chats sending at once all answered within 3 s. Then the daemon CPU a streamed reply adds (a
model writing for 3 s, shown at one edit a second; target < 2 ms), and how much of it
python-telegram-bot's edits cost alone (bench/libraries.py).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import libraries  # noqa: E402
from rousseau.agent import Request, Response, StreamEvent  # noqa: E402
from rousseau.agent.testing import FunctionProvider, text_reply  # noqa: E402
from rousseau.config import load_config  # noqa: E402
from rousseau.daemon import Daemon  # noqa: E402
from rousseau.log import configure_logging  # noqa: E402
from rousseau.router import ChatPolicy  # noqa: E402
from rousseau.transports.telegram import TelegramTransport  # noqa: E402

TOKEN = "123456:BENCH-token"
CHATS = 100
REPLIES = 200
"""Streamed replies measured, 20 at a time."""


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def fake_bot_api() -> Iterator[str]:
    """The fake Bot API in a process of its own (so it does not share the daemon's CPU);
    yields its URL."""
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.telegram", TOKEN],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        url = fake.stdout.readline().strip()
        # Anything it prints later is read and dropped: a full pipe would stop it mid-run.
        threading.Thread(target=fake.stdout.read, daemon=True).start()
        yield url
    finally:
        fake.terminate()
        fake.wait()


def call(url: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(payload or {}).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))


class Load:
    def __init__(self, url: str) -> None:
        self.url = url
        self.n = 0

    def _next(self, count: int) -> list[dict[str, Any]]:
        messages = []
        for _ in range(count):
            self.n += 1
            chat = 1000 + self.n % CHATS
            messages.append({"chat_id": chat, "user_id": chat, "text": f"m{self.n}"})
        return messages

    def push(self, count: int) -> None:
        """`count` messages at once."""
        call(self.url + "/control/push", {"messages": self._next(count)})

    def pace(self, count: int, every: float) -> None:
        """`count` messages, one every `every` seconds, pushed by the fake itself."""
        call(self.url + "/control/pace", {"messages": self._next(count), "every": every})

    def stats(self) -> dict[str, Any]:
        return call(self.url + "/control/stats")

    def latencies(self, since: int) -> list[float]:
        """Milliseconds from push to reply, for the replies sent after the first `since`."""
        return list(call(self.url + f"/control/latencies?since={since}")["latencies_ms"])

    async def wait_for(self, sent: int, limit: float = 600, key: str = "sent") -> dict[str, Any]:
        """Once `sent` messages were sent (or, with key="finished", show a whole reply)."""
        with anyio.fail_after(limit):
            while True:
                stats = await anyio.to_thread.run_sync(self.stats)
                if stats[key] >= sent:
                    return stats
                await anyio.sleep(0.05)


def bench_daemon(
    url: str, tmp: Path, answer: Callable[[Request], Awaitable[Response]] | Any, **env: str
) -> tuple[Daemon, TelegramTransport]:
    """A daemon (state in `tmp`) polling the fake Bot API at `url`, open to everyone with no
    rate limit to speak of, answered by `answer` (a function, or a provider)."""
    config = load_config(
        None,
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
            "ROUSSEAU_RATELIMIT_DEFAULT": "100000/1s",
            **env,
        },
    )
    transport = TelegramTransport(TOKEN, base_url=url, poll_timeout=10)
    daemon = Daemon(
        config,
        transports={"telegram": transport},
        chat_policies={"telegram": ChatPolicy(policy="open")},
        provider=answer if hasattr(answer, "complete") else FunctionProvider(answer, record=False),
    )
    return daemon, transport


@asynccontextmanager
async def running(daemon: Daemon, transport: TelegramTransport) -> AsyncIterator[None]:
    """The daemon running, its transport connected; stopped on leaving."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(30):
            while not transport.connected:
                await anyio.sleep(0.05)
        yield
        daemon.stop()


async def run_scenario(url: str, model_delay: float) -> None:
    tmp = Path(tempfile.mkdtemp())

    async def answer(request: Request) -> Response:
        if model_delay:
            await anyio.sleep(model_delay)
        return text_reply("echo: " + request.messages[-1].text)

    daemon, transport = bench_daemon(url, tmp, answer, ROUSSEAU_MAX_CONCURRENT_TURNS="128")
    load = Load(url)
    async with running(daemon, transport):
        if model_delay:
            started = time.monotonic()
            await anyio.to_thread.run_sync(load.push, CHATS)
            await load.wait_for(CHATS)
            print(
                f"1 s model, {CHATS} chats at once: all answered in "
                f"{time.monotonic() - started:.2f} s (target < 3 s)"
            )
        else:
            await measure(load)


async def measure(load: Load) -> None:
    # Warm up, then throughput: 5,000 messages pushed as fast as the fake takes them.
    await anyio.to_thread.run_sync(load.push, 500)
    await load.wait_for(500)
    rss_before = rss_mb()
    total = 5000
    started = time.monotonic()
    for _ in range(total // 500):
        await anyio.to_thread.run_sync(load.push, 500)
    stats = await load.wait_for(500 + total)
    elapsed = time.monotonic() - started
    print(f"throughput: {total / elapsed:.0f} messages/s across {CHATS} chats (target >= 300)")

    # Latency at 100 messages/s for 10 s: in bursts of 10 every 100 ms (each burst's last
    # message waits for the nine before it), then evenly, one every 10 ms.
    seen = stats["sent"]
    for _ in range(100):
        tick = time.monotonic()
        await anyio.to_thread.run_sync(load.push, 10)
        await anyio.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
    stats = await load.wait_for(seen + 1000)
    report_latency("in bursts of 10", await anyio.to_thread.run_sync(load.latencies, seen))
    seen = stats["sent"]
    await anyio.to_thread.run_sync(load.pace, 1000, 0.01)
    await load.wait_for(seen + 1000)
    report_latency("evenly paced", await anyio.to_thread.run_sync(load.latencies, seen))

    # Memory: 20,000 messages in all since the first reading.
    remaining = 20_000 - total - 2000
    while remaining > 0:
        await anyio.to_thread.run_sync(load.push, min(500, remaining))
        remaining -= 500
    await load.wait_for(500 + 20_000)
    rss_after = rss_mb()
    growth = (rss_after - rss_before) / rss_before * 100
    print(
        f"RSS: {rss_before:.1f} MB before, {rss_after:.1f} MB after 20,000 messages "
        f"({growth:+.1f}%, target < 10%)"
    )


def report_latency(how: str, lat: list[float]) -> None:
    q = statistics.quantiles(lat, n=100)
    print(
        f"added latency at 100 messages/s, {how}: p50 {statistics.median(lat):.1f} ms, "
        f"p99 {q[98]:.1f} ms (target p99 < 50 ms)"
    )


class PacedModel:
    """A model that writes its answer in 10 pieces 0.3 s apart."""

    name = "paced"

    async def complete(self, request: Request) -> Response:
        return text_reply(" ".join(f"word{i}" for i in range(60)))

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        text = response.message.text
        step = len(text) // 10 + 1
        for i in range(0, len(text), step):
            await anyio.sleep(0.3)
            yield StreamEvent.text_delta(text[i : i + step])
        yield StreamEvent.final(response)


async def streaming_cpu(url: str, streaming: str, replies: int = REPLIES) -> tuple[float, int]:
    """Daemon CPU seconds for `replies` answers from the paced model, 20 chats at a time,
    and the edits the fake Bot API took (the 20 warm-up replies' too)."""
    tmp = Path(tempfile.mkdtemp())
    daemon, transport = bench_daemon(url, tmp, PacedModel(), ROUSSEAU_TELEGRAM_STREAMING=streaming)
    load = Load(url)
    async with running(daemon, transport):
        await anyio.to_thread.run_sync(load.push, 20)  # warm up
        await load.wait_for(20, key="finished")
        started = time.process_time()
        for done in range(20, 20 + replies, 20):
            await anyio.to_thread.run_sync(load.push, 20)
            await load.wait_for(done + 20, key="finished")
        used = time.process_time() - started
        edits = (await anyio.to_thread.run_sync(load.stats))["calls"].get("editMessageText", 0)
    print(f"  streaming {streaming}: {edits} edits for {replies + 20} replies")
    return used, edits


def main() -> None:
    configure_logging("error")
    for delay in (0.0, 1.0):
        with fake_bot_api() as url:
            anyio.run(run_scenario, url, delay)
    cpu = {}
    for mode in ("off", "edit"):
        with fake_bot_api() as url:
            cpu[mode], edits = anyio.run(streaming_cpu, url, mode)
            if mode == "edit":
                edit_ms = libraries.edit_cost(url, TOKEN)
    added = (cpu["edit"] - cpu["off"]) / REPLIES * 1000
    print(
        f"streaming: {added:.2f} ms of daemon CPU added per streamed reply "
        f"({cpu['off'] / REPLIES * 1000:.1f} ms a reply without; target < 2 ms)"
    )
    # The preview's first send takes the place of the answer's; each edit is a call more.
    per_reply = edits / (REPLIES + 20)
    sdk = per_reply * edit_ms
    print(
        f"  of which python-telegram-bot's {per_reply:.1f} edits a reply, at {edit_ms:.2f} ms"
        f" each alone: {sdk:.2f} ms; the rest (rousseau, asyncio): {added - sdk:.2f} ms"
    )


if __name__ == "__main__":
    main()
