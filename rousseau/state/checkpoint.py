"""WAL checkpoints off the commit path.

SQLite checkpoints a WAL database inside the commit that takes the log past
`wal_autocheckpoint` pages (1,000 by default): that commit copies the log into the main file
and waits for the disk, 15-35 ms on a plain disk, and every write queued behind it on the
database thread waits too. At 100 messages a second that was twenty commits in every ten
seconds, and the tail of reply latency. Here a thread of its own, with a connection of its
own, runs a passive checkpoint a moment after writes were committed; SQLite lets it run
beside the writer, so commits only append to the log. The commit path keeps its own
checkpoint as a backstop, at BACKSTOP_PAGES, should this thread fall behind or fail.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing

import structlog

log = structlog.get_logger("rousseau.state")

AFTER = 0.5
"""Seconds between a commit and the checkpoint that follows it (commits in between share it)."""
BACKSTOP_PAGES = 10_000
"""The writer's own `wal_autocheckpoint`: about 40 MB of log."""


class Checkpointer:
    """Checkpoints the WAL of `path` after `wrote` is set, until stopped."""

    def __init__(self, path: str, wrote: threading.Event, *, after: float = AFTER) -> None:
        self._path = path
        self._wrote = wrote
        self._after = after
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rousseau-checkpoint", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the checkpoint under way, if any."""
        self._stopping.set()
        self._wrote.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None)
        except sqlite3.Error as exc:  # the writer's backstop checkpoints instead
            log.warning("store.checkpointer_failed", path=self._path, error=str(exc))
            return
        with closing(conn):
            while True:
                self._wrote.wait()
                if self._stopping.wait(self._after):
                    return
                self._wrote.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:  # busy or failing: the next commit tries again
                    log.warning("store.checkpoint_failed", path=self._path, error=str(exc))
