"""Recall at scale: a store of 1,000,000 messages, its insert rate in batches (the FTS5
triggers included) and recall latency (p50/p99) for questions scoped to their sender.

With --embeddings DIMS, recall by meaning too (sqlite-vec): an embeddings server of DIMS-wide
vectors runs in another process and is asked over HTTP through the openai SDK, as the daemon
asks a real one; the indexer's backfill throughput is measured over it on the first
BACKFILL messages, the rest are given vectors directly; then hybrid recall (the question's
vector fetched over HTTP, uncached, beside the keyword query, then fused) is timed.

Targets: at least 20,000 messages/s inserted; keyword recall p99 under 20 ms; hybrid recall
over 200,000 embedded messages p99 at most 50 ms.
Usage: python bench/recall.py [MESSAGES] [--embeddings DIMS] [--people N]
       (default 1,000,000 messages, no embeddings, 1,000 people; the store is a temp file)
--people 1 puts every message in one person's scope: recall by meaning then takes its
coarse pass (see rousseau/state/sqlite_vectors.py), as it does for a long history.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rousseau.agent import Message, Session
from rousseau.state import Store
from rousseau.state.recall import SQLiteRecall

BACKFILL = 20_000
BATCH = 10_000
USERS = 1_000
SESSIONS = 20_000
QUERIES = 1_000
VOCABULARY = 50_000


def words(rng: random.Random) -> list[str]:
    # Zipf-like: a few very common words, a long tail of rare ones
    ranks = range(1, VOCABULARY + 1)
    weights = [1 / r for r in ranks]
    pool = [f"w{r}" for r in ranks]
    return rng.choices(pool, weights, k=2_000_000)


def build(store: Store, total: int, rng: random.Random) -> float:
    stream = iter(words(rng) * (1 + total * 20 // 2_000_000))
    for s in range(SESSIONS):
        owner = f"telegram:{s % USERS}"
        store.call_sync(
            lambda db, s=s, owner=owner: db.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, owner, chat)"
                " VALUES (?, '', 0, 0, ?, ?)",
                (f"s{s}", owner, owner),
            ),
            write=True,
        )
    content = json.dumps([{"kind": "text", "text": "x"}])
    spent = 0.0  # only the inserts are timed, not making up the text
    done = 0
    while done < total:
        rows = []
        for i in range(min(BATCH, total - done)):
            text = " ".join(next(stream) for _ in range(rng.randint(6, 30)))
            rows.append((f"s{(done + i) % SESSIONS}", "user", content, text, float(done + i)))
        started = time.perf_counter()
        store.call_sync(
            lambda db, rows=rows: db.executemany(
                "INSERT INTO messages (session_id, role, content, text, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            ),
            write=True,
        )
        spent += time.perf_counter() - started
        done += len(rows)
    return done / spent


async def measure(store: Store, rng: random.Random) -> list[float]:
    return await _timed(store, SQLiteRecall(store, top_k=5, scope="sender", cache=0), rng)


def serve(port: int, dims: int) -> None:
    """The embeddings server: a vector of `dims` seeded by each text (the same text, the same
    vector), in OpenAI's response shape."""
    from aiohttp import web

    async def embed(request: web.Request) -> web.Response:
        body = await request.json()
        data = []
        for i, text in enumerate(body["input"]):
            rng = random.Random(text)
            data.append({"object": "embedding", "index": i, "embedding": unit(rng, dims)})
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return web.json_response({"object": "list", "data": data, "model": "m", "usage": usage})

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/embeddings", embed)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def unit(rng: random.Random, dims: int) -> list[float]:
    vector = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector]


def start_server(dims: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(dims)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, f"http://127.0.0.1:{port}/v1"


async def embed_all(store: Store, base_url: str, dims: int, total: int) -> tuple[float, int]:
    """Backfill through the indexer over HTTP for the first BACKFILL messages (messages/s),
    then vectors for the rest straight into the store."""
    from rousseau.config.sections import EmbeddingsConfig
    from rousseau.providers.embeddings import Embeddings
    from rousseau.state.hybrid import Indexer
    from rousseau.state.sqlite_vectors import SqliteVectors

    vectors = SqliteVectors(store)
    embeddings = Embeddings(EmbeddingsConfig(base_url=base_url, model="m", batch_size=64))
    indexer = Indexer(vectors=vectors, embeddings=embeddings, batch_size=64)
    started, through = time.perf_counter(), 0
    while through < min(BACKFILL, total):
        through += await indexer.step()
    rate = through / (time.perf_counter() - started)
    await embeddings.aclose()
    rng = random.Random(11)
    while rows := await vectors.unembedded("m", 5_000):
        await vectors.put("m", [(i, unit(rng, dims)) for i, _ in rows])
    return rate, through


async def measure_hybrid(store: Store, base_url: str, rng: random.Random) -> list[float]:
    from rousseau.config.sections import EmbeddingsConfig
    from rousseau.providers.embeddings import Embeddings
    from rousseau.state.hybrid import VectorRecall
    from rousseau.state.sqlite_vectors import SqliteVectors

    embeddings = Embeddings(EmbeddingsConfig(base_url=base_url, model="m"))
    meaning = VectorRecall(vectors=SqliteVectors(store), embeddings=embeddings, cache=0)
    recall = SQLiteRecall(store, top_k=5, scope="sender", cache=0, meaning=meaning)
    await embeddings.embed(["a first request opens the connection"])
    timings = await _timed(store, recall, rng)
    await embeddings.aclose()
    return timings


async def _timed(store: Store, recall: SQLiteRecall, rng: random.Random) -> list[float]:
    questions = store.call_sync(
        lambda db: db.execute(
            "SELECT session_id, text FROM messages WHERE id IN"
            f" (SELECT abs(random()) % (SELECT max(id) FROM messages) + 1 FROM messages"
            f" LIMIT {QUERIES})"
        ).fetchall()
    )
    timings = []
    for session_id, text in questions:
        other = f"s{(int(session_id[1:]) + USERS) % SESSIONS}"  # same owner, another session
        question = " ".join(rng.sample(text.split(), min(6, len(text.split()))))
        session = Session(id=other, messages=[Message.user(question)])
        started = time.perf_counter()
        await recall.recall(session, question)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _quantiles(timings: list[float]) -> str:
    q = statistics.quantiles(timings, n=100)
    return f"p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms"


def main() -> None:
    global USERS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("messages", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--embeddings", type=int, metavar="DIMS", help="recall by meaning too")
    parser.add_argument("--people", type=int, default=USERS, help="whose the sessions are")
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    USERS = args.people
    if args.serve:
        serve(*args.serve)
        return
    total = args.messages
    rng = random.Random(7)
    if args.embeddings:
        from rousseau.state.sqlite_vectors import enable_sqlite_vec

        assert enable_sqlite_vec() is None, enable_sqlite_vec()
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "bench.db") as store:
        rate = build(store, total, rng)
        print(f"inserted {total:,} messages: {rate:,.0f} messages/s (target 20,000)")
        timings = anyio.run(measure, store, rng)
        print(
            f"keyword recall over {total:,} messages of {USERS:,} people,"
            f" {len(timings)} questions:"
            f" {_quantiles(timings)} (target p99 < 20 ms)"
        )
        if not args.embeddings:
            return
        server, base_url = start_server(args.embeddings)
        try:
            backfill, through = anyio.run(embed_all, store, base_url, args.embeddings, total)
            print(
                f"backfill over HTTP ({args.embeddings} dimensions, batches of 64):"
                f" {backfill:,.0f} messages/s on the first {through:,}"
            )
            timings = anyio.run(measure_hybrid, store, base_url, rng)
        finally:
            server.terminate()
            server.wait()
        print(
            f"hybrid recall over {total:,} embedded messages, {len(timings)} questions"
            f" (the question embedded over HTTP each time): {_quantiles(timings)}"
            " (target p99 <= 50 ms)"
        )


if __name__ == "__main__":
    main()
