"""Three attacks on the web face of `rousseau run` (this checkout's code, in a process of its
own, with `web:` and `health:` on two loopback ports and the fake model behind the API),
printing what the daemon did:

- a 200 MB body posted to /v1/chat/completions with a valid key, once declared
  (Content-Length) and once chunked: the status it got, how much had been sent by then, and
  the daemon's RSS before, after, and at its peak (VmHWM);
- a slowloris: 120 connections on each port at once, each sending one header line every
  2 s (a closed one is opened again at the next line), from 127.0.0.1, the address the
  health checks come from too: the answer times of ten /healthz on each port meanwhile;
- 30 wrong passwords, each with another X-Forwarded-For: for the owner from 127.0.0.1 (no
  proxy is trusted there), then for a chat user from a trusted proxy (127.0.0.9, whose
  forwarded addresses are believed): the statuses.

At the end, one ordinary API call shows the daemon still answers.

    python bench/web_attacks.py
"""

from __future__ import annotations

import itertools
import json
import re
import select
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.daemon import DaemonDied, Model, Process  # noqa: E402
from tests.fakes.llm import FakeLLMServer  # noqa: E402
from tests.helpers import free_port  # noqa: E402

KEY = "rsk-bench-0123456789abcdefghijklmnop"
PASSWORD = "a password nobody guesses"
PROXY = "127.0.0.9"
BODY = 200 * 1024 * 1024
PIECE = 1024 * 1024
SLOWLORIS = 120
LINE_EVERY = 2.0
PROBES = 10
PROBE_LIMIT = 2.0
"""Seconds a /healthz answer may take to count as answered (a load balancer's patience)."""


class Daemon(Process):
    """`rousseau run` of this checkout with the web face and a health port."""

    def __init__(self, tmp: Path, llm: FakeLLMServer) -> None:
        from argon2 import PasswordHasher

        self.web, self.health = free_port(), free_port()
        config = tmp / "config.yaml"
        config.write_text(
            json.dumps(
                {
                    "provider": "openai",
                    "openai": {"api_key": "sk-bench", "base_url": llm.url + "/v1"},
                    "state": {"path": str(tmp / "state.db")},
                    "agent": {"workspace": str(tmp / "ws")},
                    "health": {"listen": f"127.0.0.1:{self.health}"},
                    "web": {
                        "listen": f"127.0.0.1:{self.web}",
                        "password_hash": PasswordHasher().hash(PASSWORD),
                        "chat_users": {"carol": PasswordHasher().hash(PASSWORD)},
                        "api_keys": [{"key": KEY, "owner": "bench"}],
                        "trusted_proxies": [PROXY],
                    },
                }
            )
        )
        config.chmod(0o600)
        super().__init__(config, tmp / "daemon.log")

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.check()
            if all(healthz(port, timeout=1)[0] == 200 for port in (self.web, self.health)):
                return
            time.sleep(0.05)
        raise TimeoutError("the daemon's ports never answered /healthz")

    def memory_mib(self) -> tuple[float, float]:
        """VmRSS and VmHWM (the peak RSS so far), in MiB."""
        self.check()
        found = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) / 1024
        return found["VmRSS"], found["VmHWM"]


def healthz(port: int, timeout: float = PROBE_LIMIT) -> tuple[int, float]:
    """GET /healthz on a connection of its own: the status (0 for none) and the seconds taken."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.settimeout(max(0.01, timeout - (time.monotonic() - started)))
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = conn.recv(64)
    except OSError:
        return 0, time.monotonic() - started
    status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - started


# -- a 200 MB body ------------------------------------------------------------------------


def big_body(port: int, chunked: bool) -> tuple[int, int, float]:
    """Post BODY bytes to the API, reading the answer as soon as there is one: its status
    (0 for none), the bytes of the body sent by then, and the seconds taken."""
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    head += "Content-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {BODY}\r\n\r\n"
    # One JSON document of BODY bytes: a user message of 200 MB.
    start = b'{"model": "default", "messages": [{"role": "user", "content": "'
    end = b'"}]}'
    pieces = [b"a" * PIECE] * (BODY // PIECE)  # one piece, referred to over and over
    pieces[0] = start + pieces[0][len(start) :]
    pieces[-1] = pieces[-1][: -len(end)] + end
    framed = (b"%x\r\n%s\r\n" % (len(p), p) if chunked else p for p in pieces)
    body = itertools.chain(framed, [b"0\r\n\r\n"] if chunked else [])
    started = time.monotonic()
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode())
        conn.setblocking(False)
        pending = memoryview(next(body))
        while True:
            readable, writable, _ = select.select([conn], [conn] if pending else [], [], 30)
            if not readable and not writable:
                break  # 30 s of nothing: no answer
            try:
                if readable:
                    answer = conn.recv(4096)
                    break
                pending = pending[conn.send(pending) :]
            except OSError:  # closed on us: whatever it said is read above, if anything
                break
            if not pending:
                sent += PIECE
                pending = memoryview(next(body, b""))
    status = int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, min(sent, BODY), time.monotonic() - started


def bodies(daemon: Daemon) -> None:
    print("A 200 MB body to /v1/chat/completions, with a valid key")
    for chunked in (False, True):
        rss, peak = daemon.memory_mib()
        status, sent, took = big_body(daemon.web, chunked)
        time.sleep(1)  # whatever the daemon still does with it
        after, peak_after = daemon.memory_mib()
        kind = "chunked" if chunked else "declared"
        print(
            f"  {kind:<9} status {status}  after {sent / 2**20:.0f} MiB sent, {took:.2f} s;"
            f"  RSS {rss:.0f} -> {after:.0f} MiB ({after - rss:+.0f}),"
            f"  peak {peak:.0f} -> {peak_after:.0f} MiB ({peak_after - peak:+.0f})"
        )


# -- slowloris ----------------------------------------------------------------------------


async def trickler(port: int, stop: anyio.Event, closed: Counter[int]) -> None:
    """One slowloris connection, opened again whenever the daemon closes it."""
    while not stop.is_set():
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(LINE_EVERY)
            continue
        async with stream:
            try:
                await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
                while not stop.is_set():
                    with anyio.move_on_after(LINE_EVERY):
                        await stream.receive()  # anything at all: it answered
                        break
                    await stream.send(b"X-Slow: 1\r\n")
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass  # closed by the daemon
        if not stop.is_set():
            closed[port] += 1
            await anyio.sleep(LINE_EVERY)  # the next line's time: opened again


async def slowloris(daemon: Daemon) -> None:
    ports = {"web": daemon.web, "health": daemon.health}
    print(
        f"Slowloris: {SLOWLORIS} connections on each port from 127.0.0.1, a header line"
        f" every {LINE_EVERY:.0f} s; /healthz probed from 127.0.0.1 meanwhile"
    )
    stop = anyio.Event()
    closed: Counter[int] = Counter()
    answers: dict[str, list[tuple[int, float]]] = {name: [] for name in ports}
    async with anyio.create_task_group() as tg:
        for port in ports.values():
            for _ in range(SLOWLORIS):
                tg.start_soon(trickler, port, stop, closed)
        await anyio.sleep(2 * LINE_EVERY)  # all connected and trickling
        for _ in range(PROBES):
            for name, port in ports.items():
                answers[name].append(await anyio.to_thread.run_sync(healthz, port))
            await anyio.sleep(1)
        stop.set()
        tg.cancel_scope.cancel()
    for name, port in ports.items():
        got = answers[name]
        times = [t for status, t in got if status == 200]
        within = sum(1 for status, t in got if status == 200 and t <= PROBE_LIMIT)
        shown = "none answered"
        if times:
            shown = (
                f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
            )
        print(
            f"  {name:<7} port: {within} of {len(got)} answered 200 within {PROBE_LIMIT:.0f} s"
            f" ({shown}); the daemon closed {closed[port]} trickling connections"
        )


# -- passwords ----------------------------------------------------------------------------


def passwords(daemon: Daemon) -> None:
    import httpx

    print("30 wrong passwords, each with another X-Forwarded-For")
    for local, user, said in (
        ("127.0.0.1", "owner", "owner, from 127.0.0.1 (not trusted)"),
        (PROXY, "carol", f"carol, from the trusted {PROXY}"),
    ):
        transport = httpx.HTTPTransport(local_address=local)
        with httpx.Client(base_url=f"http://127.0.0.1:{daemon.web}", transport=transport) as c:
            token = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text)
            assert token is not None
            statuses = [
                c.post(
                    "/login",
                    data={"csrf": token.group(1), "user": user, "password": f"guess {i}"},
                    headers={"X-Forwarded-For": f"10.{i}.{i}.{i}"},
                ).status_code
                for i in range(30)
            ]
        print(f"  {said:<36} {' '.join(map(str, statuses))}")


def still_answers(daemon: Daemon) -> None:
    import httpx

    answer = httpx.post(
        f"http://127.0.0.1:{daemon.web}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "default", "messages": [{"role": "user", "content": "still there?"}]},
        timeout=30,
    )
    text = answer.json()["choices"][0]["message"]["content"] if answer.status_code == 200 else ""
    print(f"Afterwards, an ordinary API call: {answer.status_code} {text!r}")


def run() -> int:
    llm = FakeLLMServer().start()
    llm.responder = Model()  # echoes at once
    try:
        with tempfile.TemporaryDirectory(prefix="rousseau-bench-") as tmp:
            daemon = Daemon(Path(tmp), llm)
            daemon.start()
            try:
                daemon.wait_healthy()
                time.sleep(2)  # settled: the framework imported, the first requests served
                print(f"rousseau run, RSS {daemon.memory_mib()[0]:.0f} MiB once serving")
                bodies(daemon)
                anyio.run(slowloris, daemon)
                passwords(daemon)
                still_answers(daemon)
            except (DaemonDied, TimeoutError) as exc:
                print(f"{exc}; the end of its log:\n{daemon.tail()}", file=sys.stderr)
                return 1
            finally:
                daemon.stop()
    finally:
        llm.stop()
    return 0


def main() -> None:
    # A terminated benchmark still stops the daemon it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(run())


if __name__ == "__main__":
    main()
