"""Recall by meaning beside recall by keywords: the background indexer that embeds every
message, the query's side (embedded on the turn, bounded in time, cached), and reciprocal
rank fusion of the two rankings.

Embedding never happens on a turn's path but for the newest message's own text, which a
turn's recall needs; a failing or slow endpoint leaves the turn with keyword recall.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import anyio
import structlog

from rousseau.agent import ProviderRequestError
from rousseau.backoff import backoff

if TYPE_CHECKING:
    from rousseau.state.protocol import Recalled, VectorStore

log = structlog.get_logger(__name__)

RRF_K = 60  # the usual constant of reciprocal rank fusion: 1 / (60 + rank)
QUERY_TIMEOUT = 5.0  # the longest a turn's recall waits for its query's vector
IDLE = 5.0  # seconds between looks for new messages when all are embedded
PRUNE_EVERY = 3600.0  # seconds between sweeps for the vectors of deleted messages
FAILURE_CAP = 300.0  # the longest wait after failures before asking the endpoint again
REFUSED_INPUT = (400, 413, 422)  # what an endpoint answers to a text it will not embed
REMEMBERED = 10_000  # refused messages remembered


class Embeddings(Protocol):
    """Text to vectors (providers/embeddings.py's client, built by the assembly)."""

    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


def fuse(rankings: list[list[Recalled]], limit: int) -> list[Recalled]:
    """Reciprocal rank fusion: each message scores the sum of 1 / (RRF_K + rank) over the
    rankings it is in; the best `limit`, each shown as the first ranking that has it shows it
    (keyword recall's snippet is centred on the words that matched)."""
    scores: dict[int, float] = {}
    shown: dict[int, Recalled] = {}
    for ranking in rankings:
        for rank, found in enumerate(ranking, 1):
            scores[found.message_id] = scores.get(found.message_id, 0.0) + 1.0 / (RRF_K + rank)
            shown.setdefault(found.message_id, found)
    best = sorted(scores, key=lambda i: -scores[i])[:limit]  # ties: the first ranking's order
    return [shown[i] for i in best]


@dataclass(kw_only=True)
class Indexer:
    """Embeds every message with text, oldest first, in batches, forever (the daemon) or
    until none is left (`rousseau memory reindex`). Where it reached is kept in the store:
    stopped at any point, it resumes there."""

    vectors: VectorStore
    embeddings: Embeddings
    batch_size: int = 64
    _failures: int = field(default=0, init=False)
    _refused: set[int] = field(default_factory=set, init=False)
    """Messages the endpoint refused, left out until the next start."""

    async def step(self) -> int:
        """Embed the next batch; how many messages it held (0: all are embedded). A message
        the endpoint refuses (too long for it, say) is left out, where others of its batch
        are taken: one such message must not stop the indexing of all that follow."""
        rows = await self.vectors.unembedded(self.embeddings.model, self.batch_size)
        rows = [r for r in rows if r[0] not in self._refused]
        if not rows:
            return 0
        try:
            made = await self.embeddings.embed([text for _, text in rows])
        except ProviderRequestError as exc:
            if exc.status not in REFUSED_INPUT:
                raise
            await self.vectors.put(self.embeddings.model, await self._one_by_one(rows, exc))
            return len(rows)
        vectors = [(i, v) for (i, _), v in zip(rows, made, strict=True)]
        await self.vectors.put(self.embeddings.model, vectors)
        return len(rows)

    async def _one_by_one(
        self, rows: list[tuple[int, str]], refused: ProviderRequestError
    ) -> list[tuple[int, list[float]]]:
        """The batch's vectors asked for one message at a time, leaving out (and
        remembering) those refused; if all are, the endpoint's refusal is raised."""
        made, left_out = [], []
        for message_id, text in rows:
            try:
                [vector] = await self.embeddings.embed([text])
            except ProviderRequestError as exc:
                if exc.status not in REFUSED_INPUT:
                    raise
                left_out.append(message_id)
                continue
            made.append((message_id, vector))
        if not made and len(rows) > 1:
            raise refused
        for message_id in left_out:
            log.warning("embeddings.message_refused", message=message_id, error=str(refused))
            self._refused.add(message_id)
        while len(self._refused) > REMEMBERED:
            self._refused.pop()
        return made

    async def run(self) -> None:
        """The daemon's background indexing: a failure is logged once per run of failures
        and waited out with backoff; it never ends."""
        pruned_at = 0.0
        while True:
            try:
                if time.monotonic() - pruned_at > PRUNE_EVERY:
                    if gone := await self.vectors.prune():
                        log.info("embeddings.pruned", vectors=gone)
                    pruned_at = time.monotonic()
                done = await self.step()
            except Exception as exc:  # the endpoint or the store: keyword recall carries on
                self._failures += 1
                if self._failures == 1:
                    log.warning("embeddings.failed", error=str(exc) or type(exc).__name__)
                await anyio.sleep(backoff(self._failures - 1, cap=FAILURE_CAP, base=2.0))
                continue
            if self._failures:
                log.info("embeddings.recovered", after_failures=self._failures)
                self._failures = 0
            if done:
                log.debug("embeddings.indexed", messages=done)
            else:
                await anyio.sleep(IDLE)


@dataclass(kw_only=True)
class VectorRecall:
    """A turn's recall by meaning: the newest message's vector (cached, bounded in time),
    then its nearest stored messages in the same scope as keyword recall's."""

    vectors: VectorStore
    embeddings: Embeddings
    cache: int = 256
    _queries: OrderedDict[str, list[float]] = field(default_factory=OrderedDict, init=False)
    _failing: bool = field(default=False, init=False)

    async def nearest(
        self, text: str, limit: int, *, exclude: str, scope_of: str | None, agent: str
    ) -> list[Recalled]:
        """The messages closest in meaning to `text`; none when the endpoint fails."""
        vector = await self._vector(text)
        if vector is None:
            return []
        try:
            return await self.vectors.nearest(
                self.embeddings.model,
                vector,
                limit,
                exclude=exclude,
                scope_of=scope_of,
                agent=agent,
            )
        except Exception as exc:  # a store without its vector table: keywords alone
            log.warning("embeddings.nearest_failed", error=str(exc) or type(exc).__name__)
            return []

    async def _vector(self, text: str) -> list[float] | None:
        if (known := self._queries.get(text)) is not None:
            self._queries.move_to_end(text)
            return known
        try:
            with anyio.fail_after(QUERY_TIMEOUT):
                [vector] = await self.embeddings.embed([text])
        except Exception as exc:  # TimeoutError included: keyword recall alone this turn
            if not self._failing:
                log.warning("embeddings.recall_failed", error=str(exc) or type(exc).__name__)
            self._failing = True
            return None
        self._failing = False
        self._queries[text] = vector
        while len(self._queries) > self.cache:
            self._queries.popitem(last=False)
        return vector
