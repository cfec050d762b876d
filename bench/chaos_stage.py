"""One row's world in the chaos benchmark: the platforms' fakes, the fake model, and the
daemons configured for them (one on SQLite, three on PostgreSQL), started and warmed up:
each platform has had one message answered before any fault."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

from bench.chaos_daemons import Clock, Member, PostgresBackend, SQLiteBackend, base_config
from bench.chaos_platforms import ALL, Platform, Signal
from bench.chaos_traffic import Said, Watch
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream

WARM_UP = 120.0
"""Seconds the daemons have to answer their first message on every platform (under
libfaketime on a busy machine, connecting alone has taken 20 s)."""


class NotStarted(Exception):
    """The daemons never answered a first message: the row cannot be measured."""


class Model:
    """Echoes the last message; while hung, every request waits unanswered until the hang
    ends (the daemon's client gives up on it first, after its timeout, and tries again)."""

    def __init__(self) -> None:
        self._up = threading.Event()
        self._up.set()

    def __call__(self, recorded: Recorded) -> Reply:
        self._up.wait()
        content = recorded.body["messages"][-1]["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        return openai_stream(openai_completion(f"echo: {content}"))

    def hang(self) -> None:
        self._up.clear()

    def resume(self) -> None:
        self._up.set()


class Stage:
    """The fakes and daemons of one row; `clocks` puts every daemon under libfaketime, each
    with its own clock file; `state_dir` puts a SQLite store there (a small tmpfs)."""

    def __init__(
        self,
        backend: SQLiteBackend | PostgresBackend,
        names: list[str],
        root: Path,
        *,
        chats: int,
        state_dir: Path | None = None,
        clocks: bool = False,
    ) -> None:
        self.backend = backend
        self.platforms: list[Platform] = [ALL[name]() for name in names]
        self.llm = FakeLLMServer().start()
        self.model = Model()
        self.llm.responder = self.model
        self.members: list[Member] = []
        self.clocks: list[Clock] = []
        for i in range(backend.members):
            folder = root / f"daemon-{i}"
            folder.mkdir(parents=True)
            config: dict[str, Any] = base_config(self.llm.url, folder)
            config["state"] = backend.state(folder, state_dir)
            env: dict[str, str] = {}
            for platform in self.platforms:
                config[platform.name] = platform.section(i, chats)
                if isinstance(platform, Signal):
                    env.update(platform.env)
            if clocks:
                clock = Clock(folder)
                self.clocks.append(clock)
                env.update(clock.env)
            self.members.append(Member(folder, config, env=env))
        self.watch = Watch(self.platforms).start()

    def start(self) -> None:
        for member in self.members:
            member.start()
        for platform in self.platforms:
            text = f"warm-{platform.name}"
            platform.send(platform.chat(0), text)
            if not self.watch.wait(functools.partial(set, [text]), timeout=WARM_UP):
                raise NotStarted(f"{platform.name}: no answer within {WARM_UP:g} s")

    def replies(self) -> list[Said]:
        """What the bot sent, but for the warm-up's answers."""
        return [s for s in self.watch.replies() if not s.text.startswith("echo: warm-")]

    def platform(self, name: str) -> Platform:
        return next(p for p in self.platforms if p.name == name)

    def member_polling(self, transport: str) -> Member:
        """The daemon that polls `transport`: on PostgreSQL, the one elected for it."""
        if isinstance(self.backend, SQLiteBackend):
            return self.members[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            daemon = self.backend.poller(transport)
            for member in self.members:
                if member.alive and daemon is not None and f":{member.pid}:" in daemon:
                    return member
            time.sleep(0.1)
        raise NotStarted(f"no live daemon polls {transport}")

    def stop(self) -> list[int]:
        """SIGTERM every daemon (they send what is queued, then exit); their exit codes."""
        for member in self.members:
            member.stop()
        self.watch.stop()
        return [code for member in self.members for code in member.exits]

    def close(self) -> None:
        for member in self.members:
            if member.alive:
                member.kill()
        for platform in self.platforms:
            platform.close()
        self.llm.stop()

    def tails(self) -> str:
        return "\n".join(f"-- {m.folder.name}:\n{m.tail()}" for m in self.members)

    def events(self, *names: str) -> dict[str, int]:
        """How often each event was logged, over every daemon and run."""
        counts = dict.fromkeys(names, 0)
        for member in self.members:
            for event in member.events():
                if event.get("event") in counts:
                    counts[str(event["event"])] += 1
        return counts

    def errors(self) -> list[str]:
        """The events logged at error level or worse, by name."""
        return [
            str(e.get("event"))
            for m in self.members
            for e in m.events()
            if e.get("level") in ("error", "critical")
        ]
