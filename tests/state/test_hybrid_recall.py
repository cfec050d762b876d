"""Recall by meaning, fused with recall by keywords, on both backends: SQLite with
sqlite-vec, and a real PostgreSQL with pgvector. The vectors come over HTTP from a fake
OpenAI-compatible embeddings server whose vectors the tests choose (tests/fakes/embeddings.py):
"puppy" and "dog" share an axis, so a question about a puppy is close to a message about a
dog, with no word in common."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Agent, Message, Options, ProviderError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config.sections import EmbeddingsConfig
from rousseau.providers.embeddings import Embeddings
from rousseau.state import SessionStore, Store
from rousseau.state.hybrid import Indexer, VectorRecall, fuse
from rousseau.state.protocol import Recalled, VectorStore
from rousseau.state.recall import SQLiteRecall
from tests.fakes.embeddings import FakeEmbeddings
from tests.helpers import ROUSSEAU
from tests.postgres.server import Postgres

pytestmark = pytest.mark.anyio
MEANINGS = {"dog": 0, "puppy": 0, "rex": 0, "beach": 1, "seaside": 1, "salary": 2, "pay": 2}


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings(meanings=MEANINGS).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SessionStore, VectorStore]]:
    if request.param == "sqlite":
        pytest.importorskip("sqlite_vec", reason="sqlite-vec is in the embeddings extra")
        from rousseau.state.sqlite_vectors import SqliteVectors, enable_sqlite_vec

        assert enable_sqlite_vec() is None
        with Store(tmp_path / "s.db") as store:
            vectors = SqliteVectors(store)
            yield store, vectors
            vectors.close()
        return
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_vectors import PostgresVectors

    server: Postgres = request.getfixturevalue("pgvector")
    pg = await PostgresStore.open(server.new_database())
    try:
        vectors = PostgresVectors(pg)
        assert await vectors.unavailable() is None
        yield pg, vectors
    finally:
        await pg.aclose()


def embeddings_of(fake: FakeEmbeddings, model: str = "fake-embed") -> Embeddings:
    return Embeddings(EmbeddingsConfig(base_url=fake.base_url, model=model, timeout=5))


@pytest.fixture
async def embeddings(fake: FakeEmbeddings) -> AsyncIterator[Embeddings]:
    made = embeddings_of(fake)
    yield made
    await made.aclose()


async def said(
    store: SessionStore, session_id: str, owner: str, *texts: str, agent: str = "default"
) -> None:
    await store.create_session(session_id)
    await store.set_scope(session_id, owner=owner, chat=owner, agent=agent)
    for text in texts:
        await store.append_message(session_id, Message.user(text))


async def indexed(vectors: VectorStore, embeddings: Embeddings) -> None:
    indexer = Indexer(vectors=vectors, embeddings=embeddings, batch_size=2)
    while await indexer.step():
        pass


async def recalled(
    store: SessionStore, session_id: str, meaning: VectorRecall | None, **options: object
) -> str:
    session = await store.load(session_id)
    assert session is not None
    recall = SQLiteRecall(store, meaning=meaning, **options)  # type: ignore[arg-type]
    return await recall.appendix(session)


async def test_a_question_sharing_no_word_is_recalled_by_meaning_and_not_without(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    store, vectors = backend
    await said(store, "old", "telegram:42", "Rex chewed my slippers again")
    await said(store, "noise", "telegram:42", "The weather was fine yesterday")
    await said(store, "now", "telegram:42", "how is the puppy behaving lately?")
    await indexed(vectors, embeddings)
    assert await vectors.progress("fake-embed") == (3, 3)

    assert await recalled(store, "now", None) == ""  # no word in common
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    found = await recalled(store, "now", meaning, top_k=1)
    assert "Rex chewed my slippers" in found and "weather" not in found
    assert "puppy" not in found  # never the current session


async def test_meaning_keeps_to_the_person_the_agent_and_leaves_out_the_current_session(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    store, vectors = backend
    await said(store, "alice", "telegram:1", "Alice's pay rise came through")
    await said(store, "other-agent", "telegram:2", "my salary is private", agent="coder")
    await said(store, "bob-old", "telegram:2", "a day at the seaside")
    await said(store, "bob", "telegram:2", "what about the salary?", "and the beach?")
    await indexed(vectors, embeddings)
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    found = await recalled(store, "bob", meaning)
    assert "seaside" in found  # Bob's own, by meaning
    assert "Alice" not in found and "private" not in found
    assert "beach?" not in found  # the current session
    everyone = await recalled(store, "bob", meaning, scope="all")
    assert "Alice" in everyone and "private" not in everyone  # another agent's, never


async def test_a_failing_endpoint_leaves_keyword_recall_and_the_turn_answers(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    store, vectors = backend
    await said(store, "old", "telegram:42", "the locker code is 4711", "Rex loves walks")
    await indexed(vectors, embeddings)
    await said(store, "now", "telegram:42", "what was the locker code?")
    fake.fail = True
    with pytest.raises(ProviderError, match="embeddings: HTTP 500"):
        await Indexer(vectors=vectors, embeddings=embeddings).step()
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    assert "4711" in await recalled(store, "now", meaning)  # the keywords still find it

    seen: list[str] = []

    def answer(request: object) -> object:
        seen.append(str(request.system))  # type: ignore[attr-defined]
        return text_reply("it is 4711")

    recall = SQLiteRecall(store, meaning=meaning)
    agent = Agent(FunctionProvider(answer), options=Options(history=store, recall=recall))
    session = await store.load("now")
    assert session is not None
    session.messages.pop()  # asked again, as a turn
    response = await agent.reply(session, "what was the locker code?")
    assert response.message.text == "it is 4711" and "4711" in seen[0]


async def test_indexing_resumes_where_it_stopped_and_a_new_model_starts_again(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    store, vectors = backend
    await said(store, "s", "telegram:42", *(f"message number {i}" for i in range(5)))
    indexer = Indexer(vectors=vectors, embeddings=embeddings, batch_size=2)
    assert await indexer.step() == 2
    assert await vectors.progress("fake-embed") == (2, 5)
    fake.asked.clear()
    await indexed(vectors, embeddings)  # a new indexer: the 3 left, none again
    assert [t for a in fake.asked for t in a.texts] == [f"message number {i}" for i in (2, 3, 4)]
    assert await vectors.progress("fake-embed") == (5, 5)
    assert await vectors.unembedded("fake-embed", 10) == []

    other = embeddings_of(fake, "other-embed")
    assert await vectors.progress("other-embed") == (0, 5)
    await indexed(vectors, other)
    assert await vectors.progress("other-embed") == (5, 5)
    assert await vectors.progress("fake-embed") == (0, 5)  # its vectors were dropped
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    assert await meaning.nearest("number", 5, exclude="x", scope_of=None, agent="default") == []
    await other.aclose()


async def test_a_message_the_endpoint_refuses_is_left_out_and_the_rest_embedded(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    from structlog.testing import capture_logs

    store, vectors = backend
    await said(store, "s", "telegram:42", "first", "poison pill", "third", "fourth", "poison")
    fake.refuse = "poison"
    with capture_logs() as logs:
        await indexed(vectors, embeddings)
    assert [e["event"] for e in logs] == ["embeddings.message_refused"] * 2
    fake.asked.clear()
    assert await Indexer(vectors=vectors, embeddings=embeddings).step() == 1  # (a new start)
    embedded = [t for a in fake.asked if a.ok for t in a.texts]
    assert embedded == []  # the last, refused again; the rest were embedded before
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    found = await meaning.nearest("x", 9, exclude="none", scope_of=None, agent="default")
    assert sorted(f.snippet for f in found) == ["first", "fourth", "third"]

    fake.fail = False
    fake.refuse = "o"  # every text: the endpoint is refusing, not one message
    await said(store, "t", "telegram:42", "another one", "and one more")
    with pytest.raises(ProviderError, match="HTTP 400"):
        await Indexer(vectors=vectors, embeddings=embeddings, batch_size=2).step()


async def test_a_deleted_sessions_vectors_go_with_it(
    backend: tuple[SessionStore, VectorStore], fake: FakeEmbeddings, embeddings: Embeddings
) -> None:
    store, vectors = backend
    await said(store, "gone", "telegram:42", "my dog is called Rex")
    await said(store, "kept", "telegram:42", "a puppy at the beach")
    await indexed(vectors, embeddings)
    assert await store.delete_session("gone")
    await vectors.prune()
    meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
    found = await meaning.nearest("dog", 5, exclude="x", scope_of=None, agent="default")
    assert [f.snippet for f in found] == ["a puppy at the beach"]


async def test_a_long_history_is_ranked_through_the_coarse_pass(
    tmp_path: Path, embeddings: Embeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past EXACT messages in scope, a pass over the vectors' signs picks the candidates;
    the ranking, scope and deletions hold as in the exact pass."""
    pytest.importorskip("sqlite_vec", reason="sqlite-vec is in the embeddings extra")
    from rousseau.state import sqlite_vectors
    from rousseau.state.sqlite_vectors import SqliteVectors, enable_sqlite_vec

    monkeypatch.setattr(sqlite_vectors, "EXACT", 2)
    assert enable_sqlite_vec() is None
    with Store(tmp_path / "s.db") as store:
        vectors = SqliteVectors(store)
        await said(store, "gone", "telegram:42", "my dog is called Rex")
        await said(store, "old", "telegram:42", "a puppy at the seaside", "the weather", "pay day")
        await said(store, "alice", "telegram:1", "Alice's dog")
        await indexed(vectors, embeddings)
        assert await store.delete_session("gone")
        assert await vectors.prune() == 1
        await said(store, "now", "telegram:42", "the dog?")
        meaning = VectorRecall(vectors=vectors, embeddings=embeddings)
        found = await meaning.nearest("dog", 2, exclude="now", scope_of="now", agent="default")
        assert [f.snippet for f in found] == ["a puppy at the seaside", "the weather"]
        vectors.close()


def test_fusion_rewards_what_both_rankings_found() -> None:
    def hit(i: int) -> Recalled:
        return Recalled(session_id="s", role="user", snippet=f"m{i}", created_at=0, message_id=i)

    keywords = [hit(1), hit(2), hit(3)]
    meaning = [hit(4), hit(3), hit(5)]
    assert [r.message_id for r in fuse([keywords, meaning], 3)] == [3, 1, 4]
    assert fuse([[], []], 3) == []


async def test_a_postgresql_without_pgvector_keeps_keyword_recall_and_says_so_once(
    postgres: Postgres, fake: FakeEmbeddings, tmp_path: Path
) -> None:
    """Debian's PostgreSQL 15 has no pgvector: the daemon recalls by keywords, with one
    warning at start, and no vector table is made."""
    from structlog.testing import capture_logs

    from rousseau.assembly.agent import hybrid_recall
    from rousseau.config import load_config
    from rousseau.state.backend import open_backend

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        f"state: {{url: '{postgres.new_database()}'}}\n"
        f"embeddings: {{base_url: '{fake.base_url}', model: fake-embed}}\n"
    )
    config = load_config(str(config_file), {"HOME": str(tmp_path)})
    backend = await open_backend(config, daemon=False)
    try:
        assert backend.vectors is not None
        why = await backend.vectors.unavailable()
        assert why == "the PostgreSQL server has no pgvector extension"
        with capture_logs() as logs:
            assert await hybrid_recall(config, backend) is None
        assert [(e["event"], e["reason"]) for e in logs] == [("embeddings.unavailable", why)]
        assert fake.asked == []
    finally:
        await backend.aclose()
    doctor = await anyio.run_process(
        [*ROUSSEAU, "--config", str(config_file), "doctor"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **pythonpath()},
        check=False,
    )
    [line] = [x for x in doctor.stdout.decode().splitlines() if x[6:].startswith("embeddings")]
    assert line.startswith("warn") and "no pgvector extension" in line
    assert "recall is by keywords only" in line


def pythonpath() -> dict[str, str]:
    """A checkout's code, where the tests run on one."""
    return {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
