"""The commands that read and write state, run as a user runs them on a PostgreSQL state
(a real server, tests/postgres): what they keep is in the shared database, never in a local
file the daemons do not see."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import rousseau
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU
from tests.postgres.server import Postgres
from tests.state.test_import_go import build_go_db

SOURCE = Path(rousseau.__file__).resolve().parents[1]
"""The source tree of the code under test, which the command runs too (not an older install)."""


def echo(recorded: Recorded) -> Reply:
    last = recorded.body["messages"][-1]["content"]
    return openai_stream(openai_completion(f"echo: {last}"))


class Owner:
    """Someone running commands on one config whose state is a PostgreSQL database."""

    def __init__(
        self, folder: Path, url: str, fake_llm: FakeLLMServer, telegram: FakeTelegram
    ) -> None:
        self.folder = folder
        self.url = url
        self.config = folder / "config.yaml"
        self.config.write_text(
            json.dumps(
                {
                    "provider": "openai",
                    "openai": {
                        "api_key": "sk-test",
                        "base_url": fake_llm.url + "/v1",
                        "max_retries": 0,
                    },
                    "telegram": {
                        "token": telegram.token,
                        "base_url": telegram.url,
                        "allowlist": [42],
                    },
                    "state": {"url": url, "path": str(folder / "state.db")},
                    "agent": {"workspace": str(folder / "ws")},
                    "cron": {"timezone": "UTC"},
                }
            )
        )
        self.config.chmod(0o600)

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.folder), "PYTHONPATH": str(SOURCE)}

    def run(
        self, *args: str, stdin: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*ROUSSEAU, "--config", str(self.config), *args],
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 or not check, done.stdout + done.stderr
        return done

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as db:
            return db.execute(query, params).fetchall()


@pytest.fixture
def owner(
    tmp_path: Path, postgres: Postgres, fake_llm: FakeLLMServer, telegram: FakeTelegram
) -> Iterator[Owner]:
    fake_llm.responder = echo
    yield Owner(tmp_path, postgres.new_database(), fake_llm, telegram)
    assert not (tmp_path / "state.db").exists()  # nothing went to a local store


def test_the_terminal_chat_keeps_its_conversation_in_postgresql(
    owner: Owner, fake_llm: FakeLLMServer
) -> None:
    """A turn is answered and remembered in the shared store; a second run, one message or
    interactive, continues the session with its history."""
    first = owner.run("chat", "--session", "cats", "-m", "my cat is Tom")
    assert first.stdout == "echo: my cat is Tom\n"
    assert owner.rows("SELECT role, text FROM messages WHERE session_id = 'cats' ORDER BY id") == [
        ("user", "my cat is Tom"),
        ("assistant", "echo: my cat is Tom"),
    ]

    second = owner.run("chat", "--session", "cats", "-m", "what is my cat called?")
    assert second.stdout == "echo: what is my cat called?\n"
    history = fake_llm.posts()[-1].body["messages"]
    assert [m["content"] for m in history if m["role"] != "system"] == [
        "my cat is Tom",
        "echo: my cat is Tom",
        "what is my cat called?",
    ]

    typed = owner.run("chat", "--session", "cats", stdin="and his colour?\n/session\n")
    assert "echo: and his colour?" in typed.stdout and "session cats" in typed.stdout
    assert owner.rows("SELECT message_count FROM sessions WHERE id = 'cats'") == [(6,)]
    assert "cats" in owner.run("session", "list").stdout


def test_send_delivers_through_the_shared_outbox(owner: Owner, telegram: FakeTelegram) -> None:
    """With no daemon alive the command sends the part itself, and it is recorded sent;
    with one alive the part waits in the shared outbox for it."""
    sent = owner.run("send", "telegram:42", "disk almost full")
    assert "sent 1 part(s) to telegram:42" in sent.stdout
    assert [(s.chat_id, s.text) for s in telegram.sent] == [(42, "disk almost full")]
    assert owner.rows("SELECT text, status FROM outbox") == [("disk almost full", "sent")]
    assert owner.rows("SELECT id FROM daemons") == []  # it counted as one only while sending

    alive = time.time() + 3600  # a daemon that beat just now, for this test's whole length
    with psycopg.connect(owner.url, autocommit=True) as db:
        db.execute(
            "INSERT INTO daemons (id, host, pid, started_at, beat_at)"
            " VALUES ('elsewhere', 'other-host', 1, %s, %s)",
            (alive, alive),
        )
    queued = owner.run("send", "telegram:42", "backup done")
    assert "queued 1 part(s) for telegram:42; the running daemon delivers them" in queued.stdout
    assert len(telegram.sent) == 1
    assert owner.rows("SELECT text, status FROM outbox WHERE status = 'pending'") == [
        ("backup done", "pending")
    ]


def remembering(recorded: Recorded) -> Reply:
    """'remember X' calls the memory tool; a tool's result is said back; else the system
    prompt the model was given."""
    messages = recorded.body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return openai_stream(openai_completion(f"tool: {last['content']}"))
    if last["content"].startswith("remember "):
        fact = last["content"].removeprefix("remember ")
        return openai_stream(openai_completion(None, [("memory", {"action": "add", "text": fact})]))
    return openai_stream(openai_completion(f"system: {messages[0]['content']}"))


def test_the_terminal_persons_profile_is_kept_in_postgresql(
    owner: Owner, fake_llm: FakeLLMServer
) -> None:
    """The person at the terminal has a profile like anyone: kept in the shared store, shown
    in their next chat, listed by `memory show local`."""
    fake_llm.responder = remembering
    kept = owner.run("chat", "-m", "remember the owner waters the plants on Sundays")
    assert "added: the owner waters the plants on Sundays" in kept.stdout, kept.stdout
    assert owner.rows("SELECT agent, person, text FROM profile_entries") == [
        ("default", "local", "the owner waters the plants on Sundays")
    ]
    later = owner.run("chat", "-m", "what do you know?").stdout  # a new session
    assert "] the owner waters the plants on Sundays" in later, later
    shown = owner.run("memory", "show", "local").stdout
    assert shown.startswith("local (agent default): 1 entry") and "plants" in shown


def test_import_go_copies_into_postgresql(owner: Owner) -> None:
    """Sessions, the WhatsApp chat's binding and the cron jobs land in the shared store; a
    second run finds them there."""
    go_db = build_go_db(owner.folder / "rousseau-agent.db")
    first = owner.run("import-go", str(go_db)).stdout
    assert "3 sessions (12 messages, 2 tool calls)" in first, first
    assert "1 WhatsApp chat will continue where it left off" in first
    assert "3 cron jobs" in first
    assert owner.rows("SELECT count(*) FROM sessions") == [(3,)]
    [(key, session)] = owner.rows("SELECT session_key, session_id FROM chat_sessions")
    assert key == "whatsapp:4915112345678@s.whatsapp.net"
    found = owner.run("session", "search", "milk").stdout
    assert found.startswith(session), found
    assert "morning-brief" in owner.run("cron", "list").stdout
    again = owner.run("import-go", str(go_db)).stdout
    assert "nothing new to import" in again and "already here: 3 sessions, 3 cron jobs" in again


@pytest.mark.anyio
async def test_mcp_serves_the_shared_sessions_and_jobs(owner: Owner) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp import ClientSession, StdioServerParameters, stdio_client

    owner.run("chat", "--session", "shared", "-m", "the shared conversation")
    owner.run(
        *("cron", "add", "--name", "daily", "--schedule", "0 9 * * *", "--prompt", "news"),
        *("--deliver-to", "telegram:42"),
    )
    command, *args = ROUSSEAU
    params = StdioServerParameters(
        command=command, args=[*args, "--config", str(owner.config), "mcp"], env=owner.env()
    )
    with tempfile.TemporaryFile("w+") as errors:
        async with (
            stdio_client(params, errlog=errors) as (read, write),
            ClientSession(read, write, read_timeout_seconds=30) as session,
        ):
            await session.initialize()
            listed = await session.call_tool("rousseau_list_sessions", {})
            assert '"shared"' in listed.content[0].text, listed
            jobs = await session.call_tool("rousseau_cron_list", {})
            assert "daily" in jobs.content[0].text, jobs
