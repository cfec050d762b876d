"""`rousseau run` as a subprocess, python-telegram-bot talking to a fake Bot API and the
OpenAI SDK to a fake model, both on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, Sleep, openai_completion, openai_stream
from tests.fakes.telegram import BOT_ID, FakeTelegram
from tests.helpers import ROUSSEAU, free_port


def model(recorded: Recorded) -> Reply:
    """Echo the last user message; 'slow N' waits N seconds; 'long' writes 10,000 words."""
    last = recorded.body["messages"][-1]["content"]
    if isinstance(last, list):  # content parts: the text, then images
        last = " ".join(p.get("text", f"[{p['type']}]") for p in last)
    if "long" in last:
        text = " ".join(f"w{i}" for i in range(10_000))
    else:
        text = f"echo: {last}"
    reply = openai_stream(openai_completion(text))
    for word in last.split():
        if word.startswith("slow"):
            return Sleep(float(word[4:] or 2), reply)
    return reply


@pytest.fixture
def llm(fake_llm: FakeLLMServer) -> FakeLLMServer:
    fake_llm.responder = model
    return fake_llm


class Daemon:
    def __init__(self, tmp: Path, telegram: FakeTelegram, llm: FakeLLMServer) -> None:
        self.port = free_port()
        self.config = tmp / "config.yaml"
        self.config.write_text(
            json.dumps(
                {
                    "provider": "openai",
                    "openai": {"api_key": "sk-test", "base_url": llm.url + "/v1", "max_retries": 0},
                    "telegram": {
                        "token": telegram.token,
                        "base_url": telegram.url,
                        "allowlist": [42, 43, 44],
                    },
                    "state": {"path": str(tmp / "state.db")},
                    "agent": {"workspace": str(tmp / "ws")},
                    "shutdown_grace": "5s",
                    "health": {"listen": f"127.0.0.1:{self.port}"},
                    "log": {"format": "json", "level": "info"},
                }
            )
        )
        self.log = tmp / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.open_files: int | None = None
        """A lower limit of open files for the daemon (`ulimit -n`), if set."""

    def start(self) -> Daemon:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.config.parent)}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*ROUSSEAU, "--config", str(self.config), "run"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=self._limit if self.open_files else None,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if self.health()[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("the daemon never became healthy:\n" + self.log.read_text())

    def _limit(self) -> None:
        import resource

        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            return str(r.read().decode())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


def taken_in(telegram: FakeTelegram, update: dict[str, Any], timeout: float = 20) -> None:
    """Wait until the bot asked for updates past `update`: it has taken it in, and each one
    before it (a bot acknowledges an update once it is persisted, or dropped)."""
    deadline = time.monotonic() + timeout
    while not any(offset > update["update_id"] for offset in list(telegram.offsets)):
        assert time.monotonic() < deadline, f"update {update['update_id']} was never taken in"
        time.sleep(0.02)


@pytest.fixture
def daemon(tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer) -> Iterator[Daemon]:
    d = Daemon(tmp_path, telegram, llm)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()


def test_reply_reaches_the_allowlisted_chat(daemon: Daemon, telegram: FakeTelegram) -> None:
    daemon.start()
    telegram.push("slow1 hello there", chat_id=42, user_id=42)
    [sent] = telegram.wait_sent(1)
    assert (sent.chat_id, sent.text) == (42, "echo: slow1 hello there")
    assert (42, "typing") in telegram.actions  # the reply took a second: typing was shown
    status, body = daemon.health()
    assert status == 200 and body["transports"]["telegram"]["connected"] is True
    metrics = daemon.metrics()
    assert 'rousseau_inbound_messages_total{transport="telegram"} 1.0' in metrics
    assert "rousseau_turn_seconds_count 1.0" in metrics


def test_stranger_gets_nothing_and_costs_no_model_call(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("let me in", chat_id=666, user_id=666)
    last = telegram.push("hi", chat_id=42, user_id=42)
    telegram.wait_sent(1)
    taken_in(telegram, last)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert [s.chat_id for s in telegram.sent] == [42]
    assert len(llm.posts()) == 1
    ignored = [e for e in daemon.events() if e.get("event") == "router.ignored_sender"]
    assert ignored and ignored[0]["sender"] == "666" and "telegram.allowlist" in ignored[0]["hint"]


def test_group_needs_a_mention_or_a_reply(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("just chatting", chat_id=-100, user_id=43, chat_type="supergroup")
    telegram.push("what time is it", chat_id=-100, user_id=43, chat_type="supergroup", mention=True)
    last = telegram.push(
        "and now?", chat_id=-100, user_id=44, chat_type="supergroup", reply_to_bot=True
    )
    sent = telegram.wait_sent(2)
    taken_in(telegram, last)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert len(telegram.sent) == 2
    assert sent[0].text.startswith("echo: User43: @rousseau_test_bot what time is it")
    assert sent[1].text == "echo: User44: and now?"
    assert sent[0].params["reply_parameters"]["message_id"] > 0  # quoted in groups
    assert len(llm.posts()) == 2


def test_long_reply_is_split_under_4096_with_nothing_lost(
    daemon: Daemon, telegram: FakeTelegram
) -> None:
    daemon.start()
    telegram.push("say something long")
    words = [f"w{i}" for i in range(10_000)]
    deadline = time.monotonic() + 30
    while " ".join(telegram.visible(42)).split() != words and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.stop() == 0  # what it had still to send went out first
    shown = telegram.visible(42)  # as the chat shows them (a streamed reply's edits applied)
    assert len(shown) > 1 and all(len(s.encode("utf-16-le")) // 2 <= 4096 for s in shown)
    assert " ".join(shown).split() == words


def test_two_senders_are_answered_concurrently(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("slow2 from a", chat_id=42, user_id=42)
    telegram.push("slow2 from b", chat_id=43, user_id=43)
    sent = telegram.wait_sent(2)
    first_answer = min(s.at for s in sent)
    # Both questions reached the model before either answer went out: neither waited.
    assert all(r.at < first_answer for r in llm.posts())


def test_the_same_update_twice_is_answered_once(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    update = telegram.push("only once please")
    telegram.deliver(update)
    telegram.wait_sent(1)
    taken_in(telegram, update)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert len(telegram.sent) == 1 and len(llm.posts()) == 1


def test_kill_mid_turn_then_restart_answers_exactly_once(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("slow3 survive a crash")
    deadline = time.monotonic() + 10
    while not llm.posts() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm.posts(), "the model was never asked"
    daemon.stop(signal.SIGKILL)
    daemon.start()
    [sent] = telegram.wait_sent(1, timeout=30)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert len(telegram.sent) == 1
    assert sent.text == "echo: slow3 survive a crash"


def test_history_survives_a_restart(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("my name is Ada")
    telegram.wait_sent(1)
    assert daemon.stop() == 0
    daemon.start()
    telegram.push("what is my name?")
    telegram.wait_sent(2)
    history = [m["content"] for m in llm.posts()[-1].body["messages"] if m["role"] != "system"]
    assert history == ["my name is Ada", "echo: my name is Ada", "what is my name?"]


def test_a_second_ctrl_c_quits_now_and_the_message_is_answered_at_the_next_start(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    import pty

    config = json.loads(daemon.config.read_text())
    daemon.config.write_text(json.dumps({**config, "shutdown_grace": "60s"}))
    terminal, stderr = pty.openpty()  # a person at a terminal
    env = {"PATH": os.environ["PATH"], "HOME": str(daemon.config.parent)}
    proc = subprocess.Popen(
        [*ROUSSEAU, "--config", str(daemon.config), "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    os.close(stderr)
    said = bytearray()

    def read_until(text: bytes) -> None:
        deadline = time.monotonic() + 30
        while text not in said:
            assert time.monotonic() < deadline, said.decode(errors="replace")
            try:
                said.extend(os.read(terminal, 65536))
            except OSError:  # the daemon has gone
                raise AssertionError(said.decode(errors="replace")) from None

    try:
        read_until(b"daemon.ready")
        telegram.push("slow30 a long one")
        deadline = time.monotonic() + 30
        while not llm.posts() and time.monotonic() < deadline:  # the turn is in flight
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        read_until(b"Press Ctrl-C again to quit now")
        assert b"Stopping: 1 chat being answered" in said
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130  # not the 60 s of grace, nor the 30 s turn
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(terminal)
    assert telegram.sent == []
    llm.responder = lambda r: openai_stream(openai_completion("done at last"))
    daemon.start()
    assert [s.text for s in telegram.wait_sent(1)] == ["done at last"]
    assert daemon.stop() == 0
    assert [s.text for s in telegram.sent] == ["done at last"]  # once


def test_sigterm_exits_zero_within_the_grace_period(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("slow1 finish me first")
    deadline = time.monotonic() + 30
    while not llm.posts() and time.monotonic() < deadline:  # the turn is in flight
        time.sleep(0.05)
    started = time.monotonic()
    assert daemon.stop(signal.SIGTERM, timeout=15) == 0
    assert time.monotonic() - started < 10
    # The in-flight turn was allowed to finish and its reply went out before exit.
    assert [s.text for s in telegram.sent] == ["echo: slow1 finish me first"]
    events = [e.get("event") for e in daemon.events()]
    assert "daemon.stopping" in events and "daemon.stopped" in events


def test_flood_control_is_honoured(daemon: Daemon, telegram: FakeTelegram) -> None:
    telegram.flood_once = 1
    daemon.start()
    telegram.push("hello")
    [sent] = telegram.wait_sent(1)
    assert sent.text == "echo: hello"
    assert any(e.get("event") == "telegram.flood_control" for e in daemon.events())


def test_bot_messages_are_ignored(
    daemon: Daemon, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon.start()
    telegram.push("I am a bot", from_bot=True, user_id=BOT_ID)
    last = telegram.push("hello")
    telegram.wait_sent(1)
    taken_in(telegram, last)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert len(llm.posts()) == 1


def test_doctor_checks_the_telegram_token(daemon: Daemon, telegram: FakeTelegram) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(daemon.config.parent)}
    ok = subprocess.run(
        [*ROUSSEAU, "--config", str(daemon.config), "doctor"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert "ok    telegram   connected as @rousseau_test_bot" in ok.stdout, ok.stdout
    config = json.loads(daemon.config.read_text())
    config["telegram"]["token"] = "999:wrong"
    daemon.config.write_text(json.dumps(config))
    bad = subprocess.run(
        [*ROUSSEAU, "--config", str(daemon.config), "doctor"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "FAIL  telegram   telegram.token: the bot token was rejected" in bad.stdout, bad.stdout
    assert "999:wrong" not in bad.stdout + bad.stderr


def test_an_idle_daemon_lets_its_event_loop_sleep(daemon: Daemon, telegram: FakeTelegram) -> None:
    daemon.start()
    telegram.push("hello", chat_id=42, user_id=42)
    telegram.wait_sent(1)
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/task/{daemon.proc.pid}/status")
    if not status.exists():
        pytest.skip("needs /proc to count the event loop's wake-ups")

    def woken() -> int:  # the event loop's thread: each sleep it wakes from is one switch
        line = next(s for s in status.read_text().splitlines() if s.startswith("voluntary_"))
        return int(line.split()[1])

    time.sleep(1)
    before = woken()
    time.sleep(2)
    # A wake-up or two a second (a long poll's end, a probe): not a timer forty times a
    # second, which kept a core from resting.
    assert woken() - before < 20
