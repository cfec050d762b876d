"""The state a daemon runs on, from `state:` in the config: SQLite (the default, one daemon)
or PostgreSQL (`state.url`, which several daemons share)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog

from rousseau.config import Config
from rousseau.state.daemon_state import DaemonState, TransportState
from rousseau.state.protocol import (
    DaemonStore,
    JobStore,
    ProfileStore,
    SessionStore,
    SpendingStore,
    VectorStore,
)
from rousseau.state.sqlite_cron import SqliteCronJobs
from rousseau.state.store import Store

log = structlog.get_logger("rousseau.store")

if TYPE_CHECKING:
    from rousseau.messages import KeyValue
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

CLOSE_TIMEOUT = 5.0


@dataclass(kw_only=True)
class Backend:
    store: SessionStore
    """Sessions, messages, the audit trail and recall."""
    state: DaemonStore
    """The inbox, outbox, chat map and pairing."""
    jobs: JobStore
    """Cron jobs and runs (cron.CronJobs checks what is added)."""
    transport_state: Callable[[str], KeyValue]
    """A transport's own durable state, by its name."""
    profiles: ProfileStore
    """What each agent keeps about each person it talks to."""
    cluster: PostgresDaemonState | None = None
    """Where several daemons share the state: this daemon's membership and claims."""
    vectors: VectorStore | None = None
    """The messages' embeddings, where `embeddings` is configured."""
    spending: SpendingStore | None = None
    """What every model call cost (None only where a caller built a Backend without it)."""

    async def aclose(self) -> None:
        """A clean stop: this daemon's claims are freed for the others, then the store is
        closed (a SQLite store checkpointed)."""
        if self.cluster is not None:
            await self.cluster.leave()
        if isinstance(self.store, Store):
            from rousseau.state.sqlite_vectors import SqliteVectors

            if isinstance(self.vectors, SqliteVectors):  # its reading connection
                self.vectors.close()
            close = functools.partial(self.store.close, timeout=CLOSE_TIMEOUT)
            await anyio.to_thread.run_sync(close)
        else:
            await self.store.aclose()


async def open_backend(config: Config, *, daemon: bool = True) -> Backend:
    """Open the configured state (migrating it); StoreError says why it cannot be. Only a
    `daemon` joins the daemons sharing a PostgreSQL store (a command does not)."""
    if config.state.url is None:
        from rousseau.state.sqlite_profiles import SqliteProfiles
        from rousseau.state.sqlite_spending import SqliteSpending

        vectors = None
        if config.embeddings is not None:
            from rousseau.state.sqlite_vectors import SqliteVectors, enable_sqlite_vec

            enable_sqlite_vec()  # before the store's connections open; they then have it
        # Migrations and the wait for the WAL switch are blocking work: off the event loop.
        store = await anyio.to_thread.run_sync(Store, config.state.path)
        if config.embeddings is not None:
            vectors = SqliteVectors(store)
        return Backend(
            store=store,
            state=DaemonState(store),
            jobs=SqliteCronJobs(store),
            transport_state=functools.partial(TransportState, store),
            profiles=SqliteProfiles(store),
            vectors=vectors,
            spending=SqliteSpending(store),
        )
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_cron import PostgresCronJobs
    from rousseau.state.postgres_daemon import PostgresDaemonState
    from rousseau.state.postgres_kv import PostgresTransportState
    from rousseau.state.postgres_profiles import PostgresProfiles
    from rousseau.state.postgres_spending import PostgresSpending

    async def backed_up(version: int) -> None:  # before the schema changes: a copy kept
        from rousseau.state.backup import create

        target = Path(config.backup.dir) / f"before-v{version}-{time.time():.0f}.tar"
        await create(config, target, whole=False)
        log.info("store.copied_before_migrating", path=str(target), version=version)

    pg = await PostgresStore.open(config.state.url.get_secret_value(), before=backed_up)
    state = PostgresDaemonState(pg, lease=config.state.lease)
    state.config = config.digest()
    if daemon:
        await state.beat()
    return Backend(
        store=pg,
        state=state,
        jobs=PostgresCronJobs(pg),
        transport_state=functools.partial(PostgresTransportState, pg),
        profiles=PostgresProfiles(pg),
        spending=PostgresSpending(pg),
        cluster=state if daemon else None,
        vectors=_pg_vectors(pg) if config.embeddings is not None else None,
    )


def _pg_vectors(pg: PostgresStore) -> VectorStore:
    from rousseau.state.postgres_vectors import PostgresVectors

    return PostgresVectors(pg)
