"""The `rousseau` command, run as a subprocess the way a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    Sleep,
    openai_completion,
    openai_error,
    openai_stream,
)
from tests.helpers import ROUSSEAU, free_port


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def env(home: Path, fake_llm: FakeLLMServer) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-test",
        "ROUSSEAU_OPENAI_BASE_URL": fake_llm.url + "/v1",
        "ROUSSEAU_OPENAI_MAX_RETRIES": "0",
        "ROUSSEAU_STATE_PATH": str(home / "state.db"),
        "ROUSSEAU_AGENT_WORKSPACE": str(home / "ws"),
    }


def rousseau(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROUSSEAU, *args],
        env=env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def interactive_chat(env: dict[str, str], *, text: bool) -> subprocess.Popen[Any]:
    """`rousseau chat` with its three streams piped, to type into and read as it runs."""
    return subprocess.Popen(
        [*ROUSSEAU, "chat"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
    )


def test_one_shot_chat_prints_the_reply(env: dict[str, str], fake_llm: FakeLLMServer) -> None:
    fake_llm.push(openai_stream(openai_completion("Hello from the fake model.")))
    result = rousseau("chat", "-m", "hello", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the fake model.\n"
    assert fake_llm.posts()[0].body["messages"][-1] == {"role": "user", "content": "hello"}


def test_session_continues_and_is_listed_shown_searched_deleted(
    env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(
        openai_stream(openai_completion("Noted: your cat is Tom.")),
        openai_stream(openai_completion("Tom.")),
    )
    assert rousseau("chat", "--session", "cats", "-m", "my cat is Tom", env=env).returncode == 0
    second = rousseau("chat", "--session", "cats", "-m", "what is my cat called?", env=env)
    assert second.stdout == "Tom.\n"
    history = fake_llm.posts()[1].body["messages"]
    assert [m["content"] for m in history if m["role"] != "system"] == [
        "my cat is Tom",
        "Noted: your cat is Tom.",
        "what is my cat called?",
    ]
    listed = rousseau("session", "list", env=env).stdout
    assert "cats" in listed and "my cat is Tom" in listed and " 4 " in listed
    shown = rousseau("session", "show", "cats", env=env).stdout
    assert "user: my cat is Tom\nassistant: Noted: your cat is Tom.\n" in shown
    found = rousseau("session", "search", "called", env=env).stdout
    assert found.startswith("cats") and "what is my cat called?" in found
    refused = rousseau("session", "delete", "cats", env=env)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert rousseau("session", "delete", "cats", "--yes", env=env).returncode == 0
    assert "no sessions yet" in rousseau("session", "list", env=env).stdout
    missing = rousseau("session", "show", "cats", env=env)
    assert missing.returncode == 1 and missing.stderr == "rousseau: no such session: cats\n"


def test_no_provider_configured_is_one_line(home: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ROUSSEAU_OLLAMA_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
    }
    result = rousseau("chat", "-m", "hello", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert "no model provider configured" in lines[0] and "ANTHROPIC_API_KEY" in lines[0]
    assert "run `rousseau init`" in lines[0]  # where a new user starts


def test_config_error_names_the_key_without_traceback(home: Path, env: dict[str, str]) -> None:
    config = home / "c.yaml"
    config.write_text("agent:\n  max_iterations: lots\n")
    result = rousseau("--config", str(config), "chat", "-m", "hi", env=env)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "agent.max_iterations: Input should be a valid integer" in result.stderr


def test_provider_failure_is_one_line_and_message_kept(
    env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(openai_error(401, "Incorrect API key provided"))
    result = rousseau("chat", "--session", "s1", "-m", "hello", env=env)
    assert result.returncode == 1
    assert result.stderr == (
        "rousseau: openai: HTTP 401: Incorrect API key provided "
        "(check openai.api_key or OPENAI_API_KEY)\n"
    )
    assert "user: hello" in rousseau("session", "show", "s1", env=env).stdout


def test_one_shot_never_waits_for_approval(
    env: dict[str, str], fake_llm: FakeLLMServer, home: Path
) -> None:
    fake_llm.push(
        openai_stream(openai_completion(None, [("bash", {"command": "touch made"})])),
        openai_stream(openai_completion("I was not allowed.")),
    )
    result = rousseau("chat", "-m", "make a file", env=env, timeout=20)
    assert result.returncode == 0
    assert result.stdout == "I was not allowed.\n"
    assert "bash touch made" in result.stderr and "not allowed" in result.stderr
    assert not (home / "ws" / "made").exists()


def test_interactive_chat_asks_before_running_a_tool(
    env: dict[str, str], fake_llm: FakeLLMServer, home: Path
) -> None:
    fake_llm.push(
        openai_stream(openai_completion(None, [("bash", {"command": "touch approved"})])),
        openai_stream(openai_completion("Made it.")),
        openai_stream(openai_completion(None, [("bash", {"command": "touch refused"})])),
        openai_stream(openai_completion("Okay, I won't.")),
        JSONReply(openai_completion("unused")),
    )
    result = rousseau(
        "chat", env=env, stdin="make a file\ny\nmake another\nn\n/session\n", timeout=30
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "allow bash touch approved? [y/N]" in out and "Made it." in out
    assert "allow bash touch refused? [y/N]" in out and "Okay, I won't." in out
    assert "declined" in out
    assert (home / "ws" / "approved").exists()
    assert not (home / "ws" / "refused").exists()
    assert "session " in out


def test_interrupt_stops_a_reply_and_the_chat_goes_on(
    env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(
        Sleep(30, openai_stream(openai_completion("too late"))),
        openai_stream(openai_completion("quick answer")),
    )
    proc = interactive_chat(env, text=True)
    assert proc.stdin is not None
    proc.stdin.write("be slow\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 20
    while not fake_llm.posts() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake_llm.posts(), "the first message never reached the model"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(input="now quick\n", timeout=20)
    assert proc.returncode == 0, err
    assert "(stopped)" in out and "quick answer" in out and "too late" not in out


def test_doctor_passes_and_fails(env: dict[str, str], fake_llm: FakeLLMServer) -> None:
    ok = rousseau("doctor", env=env)
    assert ok.returncode == 0, ok.stdout
    assert "ok    provider   openai" in ok.stdout and "ok    store" in ok.stdout
    assert "ok    chosen     openai: an OpenAI API key is set" in ok.stdout
    fake_llm.stop()
    bad = rousseau("doctor", env=env)
    assert bad.returncode == 1
    assert "FAIL  provider   openai: cannot connect to" in bad.stdout


def test_usage_is_shown_per_session_and_in_status(
    env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(
        openai_stream(openai_completion("one", prompt_tokens=1200, completion_tokens=30)),
        openai_stream(openai_completion("two", prompt_tokens=1300, completion_tokens=20)),
    )
    rousseau("chat", "--session", "u", "-m", "first", env=env)
    rousseau("chat", "--session", "u", "-m", "second", env=env)
    shown = rousseau("session", "show", "u", env=env).stdout
    assert shown.splitlines()[-1] == (
        "-- 4 messages; tokens: 2,500 in, 50 out, 0 cache read, 0 cache write"
    )
    status = rousseau("status", env=env)
    assert status.returncode == 0
    assert "provider   openai gpt-4.1-mini (an OpenAI API key is set)" in status.stdout
    assert ": 1 sessions" in status.stdout
    assert "tokens     2,500 in, 50 out" in status.stdout


def test_version_and_help(env: dict[str, str]) -> None:
    assert rousseau("version", env=env).stdout.startswith("rousseau 0.")
    help_text = rousseau("--help", env=env).stdout
    for command in ("chat", "session", "doctor", "version"):
        assert command in help_text


def test_ctrl_c_at_the_approval_prompt_denies_and_keeps_the_next_line(
    env: dict[str, str], fake_llm: FakeLLMServer, home: Path
) -> None:
    fake_llm.push(
        openai_stream(openai_completion(None, [("bash", {"command": "touch never"})])),
        openai_stream(openai_completion("you said after")),
    )
    proc = interactive_chat(env, text=False)
    assert proc.stdin is not None and proc.stdout is not None
    shown = bytearray()
    reader = threading.Thread(target=copy_into, args=(proc.stdout, shown), daemon=True)
    reader.start()

    def wait_for(text: bytes) -> None:
        deadline = time.monotonic() + 20
        while text not in shown and time.monotonic() < deadline:
            time.sleep(0.02)
        assert text in shown, bytes(shown)

    proc.stdin.write(b"make a file\n")
    proc.stdin.flush()
    wait_for(b"allow bash touch never? [y/N]")
    proc.send_signal(signal.SIGINT)
    wait_for(b"(stopped)")
    proc.stdin.write(b"after\n")  # typed into the approval's input(), still waiting
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    reader.join(timeout=5)
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()
    out = shown.decode()
    assert "you said after" in out  # the line typed after Ctrl-C reached the model
    assert fake_llm.posts()[-1].body["messages"][-1] == {"role": "user", "content": "after"}
    assert not (home / "ws" / "never").exists()
    audit = rousseau("audit", env=env)
    assert "bash" in audit.stdout and "cancelled" in audit.stdout, audit.stdout


def copy_into(stream: Any, shown: bytearray) -> None:
    """What a program prints, as it prints it."""
    while chunk := stream.read1(4096):
        shown.extend(chunk)


def test_session_show_and_delete_take_a_unique_prefix(
    env: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    for name in ("travel-2025", "travel-2026", "tax"):
        fake_llm.push(openai_stream(openai_completion(f"noted {name}")))
        assert rousseau("chat", "--session", name, "-m", name, env=env).returncode == 0
    assert "user: tax" in rousseau("session", "show", "ta", env=env).stdout  # "tax" only
    several = rousseau("session", "show", "tr", env=env)
    assert several.returncode == 1 and several.stderr.count("\n") == 1
    assert "travel-2025" in several.stderr and "travel-2026" in several.stderr
    deleted = rousseau("session", "delete", "travel-2026", "--yes", env=env)
    assert deleted.stdout == "deleted session travel-2026\n"
    assert "user: travel-2025" in rousseau("session", "show", "tr", env=env).stdout
    missing = rousseau("session", "delete", "zzz", "--yes", env=env)
    assert missing.returncode == 1 and missing.stderr == "rousseau: no such session: zzz\n"


def test_chat_talks_to_the_agent_it_names(
    env: dict[str, str], fake_llm: FakeLLMServer, home: Path
) -> None:
    config = home / "config.yaml"
    agents = {"work": {"system_prompt": "You do work.", "model": "work-model"}}
    config.write_text(json.dumps({"agent": {"system_prompt": "You are mine."}, "agents": agents}))
    config.chmod(0o600)
    fake_llm.push(
        openai_stream(openai_completion("working")),
        openai_stream(openai_completion("mine")),
    )
    args = ("--config", str(config), "chat")
    assert rousseau(*args, "--agent", "work", "-m", "the RHUBARB plan", env=env).stdout == (
        "working\n"
    )
    assert rousseau(*args, "-m", "what about RHUBARB", env=env).stdout == "mine\n"
    work, mine = (p.body for p in fake_llm.posts())
    assert (work["model"], work["messages"][0]["content"]) == ("work-model", "You do work.")
    assert mine["messages"][0]["content"].startswith("You are mine.")
    assert "RHUBARB" not in mine["messages"][0]["content"]  # the work agent's memory
    wrong = rousseau(*args, "--agent", "wrok", "-m", "hi", env=env)
    assert wrong.returncode == 2 and "--agent: no agent named 'wrok'" in wrong.stderr
    # Which agent a session belongs to, and the agents and routes, are on show.
    listed = rousseau("--config", str(config), "session", "list", env=env).stdout
    [work_id] = [line.split()[0] for line in listed.splitlines() if "RHUBARB plan" in line]
    shown = rousseau("--config", str(config), "session", "show", work_id, env=env).stdout
    assert "; agent work;" in shown.splitlines()[-1]
    status = rousseau("--config", str(config), "status", env=env).stdout.splitlines()
    assert any(line.startswith("agent      work: work-model; workspace ") for line in status)
    assert "route      the rest -> default" in status


def test_chat_recalls_by_meaning_with_embeddings(
    env: dict[str, str], fake_llm: FakeLLMServer, home: Path
) -> None:
    pytest.importorskip("sqlite_vec", reason="sqlite-vec is in the embeddings extra")
    from tests.fakes.embeddings import FakeEmbeddings

    fake = FakeEmbeddings(meanings={"rex": 0, "puppy": 0}).start()
    try:
        env = {
            **env,
            "ROUSSEAU_EMBEDDINGS_BASE_URL": fake.base_url,
            "ROUSSEAU_EMBEDDINGS_MODEL": "fake-embed",
        }
        fake_llm.push(openai_stream(openai_completion("Noted.")))
        assert rousseau("chat", "-m", "Rex chewed my slippers", env=env).returncode == 0
        done = rousseau("memory", "reindex", env=env)
        assert done.stdout == "2 of 2 messages embedded with fake-embed\n", done.stderr
        fake_llm.push(openai_stream(openai_completion("He is fine.")))
        result = rousseau("chat", "-m", "how is the puppy behaving?", env=env)
        assert result.returncode == 0, result.stderr
        system = fake_llm.posts()[-1].body["messages"][0]
        assert system["role"] == "system" and "Rex chewed my slippers" in system["content"]
    finally:
        fake.stop()
