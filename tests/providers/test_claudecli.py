"""claudecli: the real subprocess protocol against a fake `claude` executable."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Message, ProviderError, Request, Session, StreamEventKind
from rousseau.config import load_config
from rousseau.providers import detect_provider
from rousseau.providers.claudecli import ClaudeCLIProvider
from rousseau.state import Store

pytestmark = pytest.mark.anyio
FAKE = Path(__file__).parent.parent / "fakes" / "claude_cli.py"


@pytest.fixture
def cli(tmp_path: Path) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / "claude"
    binary.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_CLAUDE_STATE": str(tmp_path / "cli-sessions"),
        "FAKE_CLAUDE_LOG": str(tmp_path / "calls.jsonl"),
    }
    return {
        "binary": str(binary),
        "env": env,
        "log": tmp_path / "calls.jsonl",
        "dir": bin_dir,
        "workspace": tmp_path / "ws",
    }


def calls(cli: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cli["log"].read_text().splitlines()]


def provider(cli: dict[str, Any], **kw: Any) -> ClaudeCLIProvider:
    cli["workspace"].mkdir(exist_ok=True)
    return ClaudeCLIProvider(binary=cli["binary"], env=cli["env"], workspace=cli["workspace"], **kw)


def request(session_id: str, *texts: str, system: str = "") -> Request:
    messages = []
    for i, t in enumerate(texts):
        messages.append(Message.user(t) if i % 2 == 0 else Message.assistant(t))
    return Request(session_id=session_id, system=system, messages=messages)


async def test_sends_newest_turn_and_resumes_its_own_session(cli: dict[str, Any]) -> None:
    p = provider(cli, model="sonnet", permission_mode="default", extra_args=["--max-turns", "3"])
    first = await p.complete(request("chat-1", "hello", system="Be brief."))
    second = await p.complete(request("chat-1", "hello", "turn 1: hello", "and again"))
    assert first.message.text == "turn 1: hello"
    assert second.message.text == "turn 2: and again"
    assert (first.usage.input_tokens, first.usage.cache_read_tokens) == (11, 5)
    one, two = calls(cli)
    assert one["stdin"] == "hello" and two["stdin"] == "and again"
    cli_id = one["args"][one["args"].index("--session-id") + 1]
    assert two["args"][two["args"].index("--resume") + 1] == cli_id
    assert one["args"][:4] == ["-p", "--output-format", "json", "--session-id"]
    assert ["--model", "sonnet"] == one["args"][5:7]
    assert ["--permission-mode", "default"] == one["args"][7:9]
    assert ["--append-system-prompt", "Be brief."] == one["args"][9:11]
    assert one["args"][-2:] == ["--max-turns", "3"]


async def test_streams_partial_text(cli: dict[str, Any]) -> None:
    events = [e async for e in provider(cli).stream(request("s", "stream this please"))]
    deltas = [e.text for e in events if e.kind is StreamEventKind.TEXT]
    assert len(deltas) > 1 and "".join(deltas) == "turn 1: stream this please"
    assert events[-1].response is not None
    assert events[-1].response.message.text == "turn 1: stream this please"
    args = calls(cli)[0]["args"]
    assert ["--output-format", "stream-json", "--verbose", "--include-partial-messages"] == args[
        1:5
    ]


async def test_session_in_use_is_resumed_and_remembered_across_restarts(
    cli: dict[str, Any], tmp_path: Path
) -> None:
    store = Store(tmp_path / "s.db")
    # The CLI already has the session (an earlier run), but the store never learned of it.
    await provider(cli).complete(request("chat-9", "first"))
    p = provider(cli, sessions=store)
    response = await p.complete(request("chat-9", "second"))
    assert response.message.text == "turn 2: second"
    tries = calls(cli)[1:]
    assert "--session-id" in tries[0]["args"] and "--resume" in tries[1]["args"]
    # A new provider (a restart) resumes straight away from what the store remembers.
    again = await provider(cli, sessions=store).complete(request("chat-9", "third"))
    assert again.message.text == "turn 3: third"
    assert "--resume" in calls(cli)[-1]["args"]
    store.close()


async def test_failures_are_one_clear_line(cli: dict[str, Any]) -> None:
    cli["env"]["FAKE_CLAUDE_MODE"] = "fail"
    with pytest.raises(ProviderError) as err:
        await provider(cli).complete(request("s", "hi"))
    assert str(err.value).startswith("claudecli: Error: Invalid API key")
    cli["env"]["FAKE_CLAUDE_MODE"] = "error_result"
    with pytest.raises(ProviderError, match=r"^claudecli: Credit balance is too low$"):
        await provider(cli).complete(request("s2", "hi"))


async def test_check_runs_the_binary(cli: dict[str, Any], tmp_path: Path) -> None:
    await provider(cli).check()
    assert calls(cli)[0]["args"] == ["--version"]
    with pytest.raises(ProviderError, match="cannot run"):
        await ClaudeCLIProvider(binary=str(tmp_path / "nope")).check()


async def test_missing_binary(tmp_path: Path) -> None:
    p = ClaudeCLIProvider(binary=str(tmp_path / "nope"))
    with pytest.raises(
        ProviderError, match=r"^claudecli: cannot run .* \(check claudecli\.binary\)$"
    ):
        await p.complete(request("s", "hi"))


async def test_agent_turn_and_start_up_warning(cli: dict[str, Any]) -> None:
    with capture_logs() as logs:
        p = provider(cli)
    assert [e["event"] for e in logs] == ["claudecli.own_tools"]
    assert logs[0]["log_level"] == "warning"
    session = Session(id="agent-1", messages=[Message.user("what's up")])
    response = await Agent(p).turn(session)
    assert response.message.text == "turn 1: what's up"
    assert session.messages[-1].text == "turn 1: what's up"


async def test_detected_when_on_path_and_no_keys(cli: dict[str, Any], tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "PATH": cli["env"]["PATH"],
        "ROUSSEAU_OLLAMA_BASE_URL": "http://127.0.0.1:9/v1",
    }
    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        name, why = detect_provider(load_config(None, env))
    finally:
        os.environ["PATH"] = old
    assert name == "claudecli" and "Claude CLI is on PATH" in why
