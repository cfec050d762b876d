"""Two daemons on PostgreSQL behind one address per platform (a balancer sends each post to
either): Google Chat's events and Teams' activities are taken by whichever daemon a post
reaches, and every message is answered once, by either, also one posted to both."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fakes.googlechat import PROJECT, FakeGoogleChat
from tests.fakes.llm import FakeLLMServer
from tests.fakes.teams import APP_ID, PASSWORD, FakeTeams
from tests.helpers import free_port
from tests.postgres.server import Postgres
from tests.test_cluster import Member, echo

CHATS = 12


@pytest.mark.timeout(180)
def test_two_daemons_take_google_chat_and_teams_posts_and_answer_each_message_once(
    postgres: Postgres, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.responder = echo
    google, teams = FakeGoogleChat().start(), FakeTeams().start()
    senders = [f"users/2000000000000000000{n:02d}" for n in range(CHATS)]
    people = [f"bbbbbbbb-0000-4000-8000-0000000000{n:02d}" for n in range(CHATS)]
    config = {
        "provider": "openai",
        "openai": {"api_key": "sk-test", "base_url": fake_llm.url + "/v1", "max_retries": 0},
        "state": {"url": postgres.new_database(), "lease": "3s"},
        "ratelimit": {"default": "1000/1s"},
        "shutdown_grace": "5s",
    }
    members, hooks, endpoints = [], [], []
    try:
        for name in ("a", "b"):
            port, teams_port = free_port(), free_port()
            hooks.append(f"http://127.0.0.1:{port}/googlechat")
            endpoints.append(f"http://127.0.0.1:{teams_port}/api/messages")
            member = Member(tmp_path, name, config)
            section = {
                "credentials_file": str(google.credentials(member.folder)),
                "audience": PROJECT,
                "listen": f"127.0.0.1:{port}",
                "api_base": google.url,
                "certs_url": f"{google.url}/certs",
                "allowlist": senders,
                "streaming": "off",
            }
            member.config.write_text(json.dumps({**config, **{
                "state": {**config["state"], "path": str(member.folder / "s.db")},  # type: ignore[dict-item]
                "agent": {"workspace": str(member.folder / "ws")},
                "googlechat": section,
                "teams": {
                    "app_id": APP_ID,
                    "app_password": PASSWORD,
                    "listen": f"127.0.0.1:{teams_port}",
                    "login_endpoint": teams.url,
                    "service_url": teams.url,
                    "keys_url": teams.keys_url,
                    "allowlist": people,
                    "streaming": "off",
                },
            }}))  # fmt: skip
            members.append(member.start())
        spaces = [f"spaces/dm-{n}" for n in range(CHATS)]
        for n, (space, sender) in enumerate(zip(spaces, senders, strict=True)):
            event = google.message(space, sender, f"hello {n}", direct=True)
            deadline = time.monotonic() + 60
            # Every third one posted again, to the other daemon (as Chat retries a post).
            for hook in [hooks[n % 2]] + ([hooks[(n + 1) % 2]] if n % 3 == 0 else []):
                while google.post(hook, event) != 200:  # a daemon still starting: again
                    assert time.monotonic() < deadline, "the daemons never took the post"
                    time.sleep(0.2)
        chats = [f"a:1person-{n}" for n in range(CHATS)]
        for n, (chat, person) in enumerate(zip(chats, people, strict=True)):
            activity = teams.message(chat, person, f"hi {n}")
            for endpoint in [endpoints[n % 2]] + ([endpoints[(n + 1) % 2]] if n % 3 == 0 else []):
                while teams.post(endpoint, activity) != 200:
                    assert time.monotonic() < deadline, "the daemons never took the activity"
                    time.sleep(0.2)
        deadline = time.monotonic() + 60
        while (
            len(google.sent) < CHATS or len(teams.messages()) < CHATS
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # time for a double to show up
        logs = [m.log.read_text()[-2000:] for m in members]
        answered = sorted((s.space, s.text) for s in google.sent)
        assert answered == sorted((spaces[n], f"echo: hello {n}") for n in range(CHATS)), logs
        told = sorted((p.chat, p.text) for p in teams.messages())
        assert told == sorted((chats[n], f"echo: hi {n}") for n in range(CHATS)), logs
    finally:
        for member in members:
            member.stop()
        google.stop()
        teams.stop()
