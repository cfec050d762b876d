"""Recall at scale: a store of 1,000,000 messages, its insert rate in batches (the FTS5
triggers included) and recall latency (p50/p99) for questions scoped to their sender.

Targets: at least 20,000 messages/s inserted; recall p99 under 20 ms.
Usage: python bench/recall.py [MESSAGES]   (default 1,000,000; the store is a temp file)
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rousseau.agent import Message, Session
from rousseau.state import Store
from rousseau.state.recall import SQLiteRecall

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
    recall = SQLiteRecall(store, top_k=5, scope="sender", cache=0)
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


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "bench.db") as store:
        rate = build(store, total, rng)
        print(f"inserted {total:,} messages: {rate:,.0f} messages/s (target 20,000)")
        timings = anyio.run(measure, store, rng)
        quantiles = statistics.quantiles(timings, n=100)
        print(
            f"recall over {total:,} messages, {len(timings)} questions: "
            f"p50 {quantiles[49]:.2f} ms, p99 {quantiles[98]:.2f} ms (target p99 < 20 ms)"
        )


if __name__ == "__main__":
    main()
