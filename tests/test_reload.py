"""Live reload of `rousseau run` (a subprocess, Telegram and Mattermost through their fakes):
an allowlist, a system prompt and an approver rule changed by `rousseau reload` and by SIGHUP
apply to the next message, in the same process, nothing lost; a broken file keeps the
running config and names the key; a changed transport section restarts that transport
alone."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.mattermost import OWNER_ID, TOKEN, FakeMattermost
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU
from tests.test_backup import cli
from tests.test_daemon import Daemon, taken_in


def model(recorded: Recorded) -> Reply:
    """`run` asks for bash; a tool's result is told back; anything else is echoed with the
    system prompt's first line."""
    messages = recorded.body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return openai_stream(openai_completion(f"tool said: {last['content']}"))
    if "run" in str(last["content"]):
        return openai_stream(openai_completion(tool_calls=[("bash", {"command": "echo ran"})]))
    prompt = str(messages[0]["content"]).splitlines()[0]
    return openai_stream(openai_completion(f"[{prompt}] {last['content']}"))


@pytest.fixture
def llm(fake_llm: FakeLLMServer) -> FakeLLMServer:
    fake_llm.responder = model
    return fake_llm


@pytest.fixture
def daemon(tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer) -> Iterator[Daemon]:
    d = Daemon(tmp_path, telegram, llm)
    write(d, allowlist=[42], prompt="You are A.", bash="deny")
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()


def write(d: Daemon, *, allowlist: list[int], prompt: str, bash: str, **more: Any) -> None:
    data = json.loads(d.config.read_text())
    data["telegram"]["allowlist"] = allowlist
    data["agent"]["system_prompt"] = prompt
    data["agent"]["approver"] = {"mode": "pattern", bash: [{"tool": "bash"}]}
    data.update(more)
    d.config.write_text(json.dumps(data))


def reload(d: Daemon) -> subprocess.CompletedProcess[str]:
    return cli(d.config, "reload")


def said(telegram: FakeTelegram, count: int) -> list[tuple[int, str]]:
    return [(s.chat_id, s.text) for s in telegram.wait_sent(count)]


def events(d: Daemon, name: str) -> list[dict[str, Any]]:
    return [e for e in d.events() if e.get("event") == name]


def test_reload_and_sighup_apply_the_new_config_to_the_next_message(
    daemon: Daemon, telegram: FakeTelegram
) -> None:
    daemon.start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    telegram.push("hello", chat_id=42, user_id=42)
    telegram.push("let me in", chat_id=43, user_id=43)  # not on the allowlist yet
    telegram.push("run it", chat_id=42, user_id=42)
    assert said(telegram, 2)[0] == (42, "[You are A.] hello")
    assert "denied" in said(telegram, 2)[1][1].lower()

    write(daemon, allowlist=[42, 43], prompt="You are B.", bash="allow")
    done = reload(daemon)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"in daemon {pid}" in done.stdout
    telegram.push("hello again", chat_id=43, user_id=43)
    telegram.push("run it", chat_id=42, user_id=42)
    replies = said(telegram, 4)[2:]
    assert sorted(replies) == [(42, "tool said: ran"), (43, "[You are B.] hello again")]

    write(daemon, allowlist=[43], prompt="You are C.", bash="deny")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while not events(daemon, "config.reloaded")[1:]:
        assert time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.05)
    last = telegram.push("anyone?", chat_id=42, user_id=42)  # off the allowlist now
    telegram.push("and me?", chat_id=43, user_id=43)
    assert said(telegram, 5)[4] == (43, "[You are C.] and me?")
    taken_in(telegram, last)
    assert daemon.stop() == 0
    assert daemon.proc.pid == pid and len(telegram.sent) == 5  # nothing more, nothing lost


def test_a_broken_file_keeps_the_running_config(daemon: Daemon, telegram: FakeTelegram) -> None:
    from rousseau.state.lock import running

    daemon.start()
    good = daemon.config.read_bytes()
    data = json.loads(daemon.config.read_text())
    data["agent"]["max_iterations"] = "lots"
    data["agent"]["system_prompt"] = "You are broken."
    daemon.config.write_text(json.dumps(data))
    refused = reload(daemon)
    assert refused.returncode != 0  # (2: a config error, as every command says one)
    assert "agent.max_iterations: Input should be a valid integer" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)  # the daemon itself refuses it too
    deadline = time.monotonic() + 20
    while not events(daemon, "config.reload_refused"):
        assert time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.05)
    assert "agent.max_iterations" in events(daemon, "config.reload_refused")[0]["error"]
    telegram.push("still you?", chat_id=42, user_id=42)
    assert said(telegram, 1) == [(42, "[You are A.] still you?")]
    deadline = time.monotonic() + 20  # published within its 2 s, like every change
    while "ok" not in (published := running(daemon.config.parent / "state.db")).config:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert published is not None
    assert published.config["digest"] == hashlib.sha256(good).hexdigest()[:12]  # still it
    assert published.config["ok"] is False and "agent.max_iterations" in published.config["error"]


def test_a_changed_section_restarts_that_transport_alone(
    daemon: Daemon, telegram: FakeTelegram, tmp_path: Path
) -> None:
    chat = FakeMattermost().start()
    moved = FakeTelegram(token=telegram.token).start()
    try:
        mattermost = {"url": chat.url, "token": TOKEN, "allowlist": [OWNER_ID]}
        write(daemon, allowlist=[42], prompt="You are A.", bash="deny", mattermost=mattermost)
        daemon.start()
        chat.wait_ready()
        telegram.push("before", chat_id=42, user_id=42)
        said(telegram, 1)
        data = json.loads(daemon.config.read_text())
        data["telegram"]["base_url"] = moved.url  # the Bot API moved (a local server)
        daemon.config.write_text(json.dumps(data))
        done = reload(daemon)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "telegram: restarted with its new section" in done.stdout
        moved.push("after", chat_id=42, user_id=42, message_id=100)  # the chat goes on
        assert [(s.chat_id, s.text) for s in moved.wait_sent(1)] == [(42, "[You are A.] after")]
        assert chat.authenticated == 1  # Mattermost's stream was never touched
        restarted = events(daemon, "config.transport_restarted")
        assert [e["transport"] for e in restarted] == ["telegram"]
        data["mattermost"]["url"] = "chat.example.org"  # no scheme: builds no transport
        daemon.config.write_text(json.dumps(data))
        kept = reload(daemon)
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert "mattermost: its new section was refused (mattermost.url:" in kept.stdout
        assert chat.authenticated == 1 and daemon.proc is not None and daemon.proc.poll() is None
    finally:
        chat.stop()
        moved.stop()


@pytest.mark.anyio
async def test_status_shows_the_config_each_daemon_of_a_cluster_runs(
    tmp_path: Path, postgres: Any
) -> None:
    """Each daemon reloads its own file: status shows the digest each one runs."""
    from rousseau.config import load_config
    from rousseau.state.backend import open_backend

    url = postgres.new_database()
    backends, digests = [], []
    for n in (1, 2):
        file = tmp_path / f"daemon{n}.yaml"
        file.write_text(f"state:\n  url: {url}\nagent:\n  system_prompt: daemon {n}\n")
        config = load_config(str(file), {"HOME": str(tmp_path)})
        backends.append(await open_backend(config))
        digests.append(config.digest())
    try:
        status = await anyio.run_process(
            [*ROUSSEAU, "--config", str(tmp_path / "daemon1.yaml"), "status"],
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
            check=False,
        )
    finally:
        for backend in backends:
            await backend.aclose()
    said = status.stdout.decode()
    assert status.returncode == 0, status.stderr.decode()
    assert digests[0] != digests[1]
    for backend, digest in zip(backends, digests, strict=True):
        assert backend.cluster is not None
        assert f"{backend.cluster.id}" in said and f"config {digest}" in said


@pytest.mark.anyio
async def test_a_turn_running_through_a_reload_finishes_on_its_own_config(
    tmp_path: Path,
) -> None:
    """The turn that was running when the prompt changed asks its second question with the
    prompt it started with; the next turn has the new one."""
    from rousseau.agent import Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
    from rousseau.config import load_config
    from rousseau.transports.base import MemoryTransport
    from tests.helpers import serving

    def written(prompt: str) -> None:
        (tmp_path / "config.yaml").write_text(
            f"agent:\n  system_prompt: {prompt}\n"
            "  approver: {mode: pattern, allow: [{tool: bash}]}\n"
        )

    def answer(request: Request) -> Response:
        last = request.messages[-1]
        if last.tool_results:
            return text_reply(f"second call under: {request.system.splitlines()[0]}")
        if "slow" in last.text:
            return tool_reply("bash", command="sleep 2")
        return text_reply(f"under: {request.system.splitlines()[0]}")

    written("You are A.")
    env = {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")}
    config = load_config(str(tmp_path / "config.yaml"), env)
    memory = MemoryTransport()
    async with serving(memory, config, FunctionProvider(answer), ["user"]) as daemon:
        await memory.inject("slow please")
        await anyio.sleep(0.5)  # the bash call runs
        written("You are B.")
        assert await daemon.reload()
        with anyio.fail_after(20):
            [during] = await memory.wait_sent(1)
        await memory.inject("and now?")
        with anyio.fail_after(20):
            after = (await memory.wait_sent(2))[1]
    assert during.text == "second call under: You are A."
    assert after.text == "under: You are B."
