"""Recall by meaning in the daemon and from the command line: the background indexer embeds
what is said, a later question finds it by meaning, a failing endpoint never holds up an
answer, and `rousseau memory reindex` embeds a history with progress, resuming where a
failure stopped it. The embeddings server is tests/fakes/embeddings.py, over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Message, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.state import Store
from rousseau.transports.base import MemoryTransport
from tests.fakes.embeddings import FakeEmbeddings
from tests.helpers import ROUSSEAU, serving

pytest.importorskip("sqlite_vec", reason="sqlite-vec is in the embeddings extra")
pytestmark = pytest.mark.anyio
MEANINGS = {"dog": 0, "puppy": 0, "rex": 0}


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings(meanings=MEANINGS, key="sk-embed").start()
    yield server
    server.stop()


def write_config(tmp: Path, fake: FakeEmbeddings) -> Path:
    path = tmp / "config.yaml"
    embeddings = {"base_url": fake.base_url, "api_key": "sk-embed", "model": "fake-embed"}
    config = {
        "state": {"path": str(tmp / "s.db")},
        "agent": {"workspace": str(tmp / "ws")},
        "embeddings": {**embeddings, "batch_size": 3},
    }
    path.write_text(json.dumps(config))
    return path


def answer(request: Request) -> Response:
    return text_reply("ok")


@asynccontextmanager
async def daemon(
    tmp: Path, fake: FakeEmbeddings
) -> AsyncIterator[tuple[MemoryTransport, FunctionProvider]]:
    transport, provider = MemoryTransport(), FunctionProvider(answer)
    config = load_config(str(write_config(tmp, fake)), {"HOME": str(tmp)})
    async with serving(transport, config, provider, ["alice"]):
        yield transport, provider


async def say(transport: MemoryTransport, text: str) -> str:
    before = len(transport.sent)
    await transport.inject(text, sender_id="alice", chat_id="alice", message_id=text)
    with anyio.fail_after(20):
        sent = await transport.wait_sent(before + 1)
    return sent[before].text


async def embedded(tmp: Path, text: str) -> None:
    """Wait until the indexer has kept the vector of the message saying `text`."""
    import sqlite3

    query = (
        "SELECT count(*) FROM vector_state"
        " WHERE cursor >= (SELECT max(id) FROM messages WHERE text = ?)"
    )
    with anyio.fail_after(30):
        while True:
            with sqlite3.connect(tmp / "s.db") as db:
                if db.execute(query, (text,)).fetchone()[0]:
                    return
            await anyio.sleep(0.1)


async def test_the_daemon_embeds_in_the_background_and_recalls_by_meaning(
    tmp_path: Path, fake: FakeEmbeddings
) -> None:
    async with daemon(tmp_path, fake) as (transport, provider):
        assert await say(transport, "Rex chewed my slippers again") == "ok"
        assert await say(transport, "/new") == "Started a new conversation."
        await embedded(tmp_path, "Rex chewed my slippers again")
        assert await say(transport, "how is the puppy behaving lately?") == "ok"
        assert "Rex chewed my slippers again" in provider.requests[-1].system
    assert all(a.ok and a.key == "sk-embed" and a.model == "fake-embed" for a in fake.asked)


async def test_a_failing_endpoint_never_holds_up_an_answer(
    tmp_path: Path, fake: FakeEmbeddings
) -> None:
    fake.fail = True
    with capture_logs() as logs:
        async with daemon(tmp_path, fake) as (transport, provider):
            assert await say(transport, "Rex chewed my slippers again") == "ok"
            assert await say(transport, "/new") == "Started a new conversation."
            assert await say(transport, "how is the puppy behaving lately?") == "ok"
            assert "Rex chewed" not in provider.requests[-1].system
            with anyio.fail_after(30):  # the indexer's next look finds it failing
                while not any(e["event"] == "embeddings.failed" for e in logs):
                    await anyio.sleep(0.1)
            fake.fail = False  # the endpoint is back: what was said is embedded after all
            await embedded(tmp_path, "Rex chewed my slippers again")
    events = [e["event"] for e in logs]
    assert events.count("embeddings.failed") == 1  # once for the whole run of failures
    assert "embeddings.recovered" in events and "embeddings.recall_failed" in events


def rousseau(tmp: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROUSSEAU, "--config", str(config), *args],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp),
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a checkout's code
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_reindex_embeds_the_history_with_progress_and_resumes(
    tmp_path: Path, fake: FakeEmbeddings
) -> None:
    config = write_config(tmp_path, fake)

    async def fill() -> None:
        with Store(tmp_path / "s.db") as store:
            await store.create_session("s")
            for i in range(7):
                await store.append_message("s", Message.user(f"note {i}"))

    anyio.run(fill)
    fake.key = "another key"  # refused: nothing is embedded, and the command says why
    done = rousseau(tmp_path, config, "memory", "reindex")
    assert done.returncode == 1
    assert "embeddings: HTTP 401" in done.stderr and "check embeddings.api_key" in done.stderr
    assert "sk-embed" not in done.stderr

    fake.key = "sk-embed"
    done = rousseau(tmp_path, config, "memory", "reindex")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "7 of 7 messages embedded with fake-embed\n"
    assert "[" in done.stderr and "7/7 100%" in done.stderr
    texts = [t for a in fake.asked if a.ok for t in a.texts]
    assert texts == [f"note {i}" for i in range(7)]  # in batches of 3, each once
    assert [len(a.texts) for a in fake.asked if a.ok] == [3, 3, 1]

    again = rousseau(tmp_path, config, "memory", "reindex")
    assert again.stdout == "7 of 7 messages embedded with fake-embed\n"
    assert len([a for a in fake.asked if a.ok]) == 3  # nothing asked again


def test_reindex_without_embeddings_says_what_to_set(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": {"path": str(tmp_path / "s.db")}}))
    done = rousseau(tmp_path, config, "memory", "reindex")
    assert done.returncode == 2
    assert "embeddings is not configured" in done.stderr


def test_doctor_checks_the_endpoint_and_tells_how_far_indexing_reached(
    tmp_path: Path, fake: FakeEmbeddings
) -> None:
    config = write_config(tmp_path, fake)
    lines = rousseau(tmp_path, config, "doctor").stdout.splitlines()
    [line] = [x for x in lines if x[6:].startswith("embeddings")]
    assert line.startswith("ok ")
    assert f"fake-embed at {fake.base_url} answers (8 dimensions)" in line
    assert "0 of 0 messages embedded" in line
    fake.fail = True
    lines = rousseau(tmp_path, config, "doctor").stdout.splitlines()
    [line] = [x for x in lines if x[6:].startswith("embeddings")]
    assert line.startswith("FAIL") and "embeddings: HTTP 500" in line
