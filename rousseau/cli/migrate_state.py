"""`rousseau migrate-state --to postgresql://...`: the SQLite store copied into PostgreSQL."""

from __future__ import annotations

import argparse
from pathlib import Path

from rousseau.cli.common import fail, load


def migrate_state(args: argparse.Namespace) -> int:
    import anyio

    from rousseau.agent import StoreError
    from rousseau.state import Store
    from rousseau.state.lock import running
    from rousseau.state.migrate import Copied
    from rousseau.state.migrate import migrate_state as copy
    from rousseau.state.postgres import PostgresStore

    config = load(args)
    source = Path(config.state.path).expanduser()
    if not args.to.startswith(("postgresql://", "postgres://")):
        fail("--to: a PostgreSQL URL, postgresql://user:password@host:port/database")
        return 2
    if running(source) is not None:
        raise StoreError(f"a daemon runs on {source}: stop it first (its work must be finished)")
    if not source.is_file():
        raise StoreError(f"no SQLite store at {source} (state.path)")
    Store(source).close()  # its schema brought up to date first

    async def go() -> Copied:
        target = await PostgresStore.open(args.to)
        try:
            return await copy(source, target)
        finally:
            await target.aclose()

    copied = anyio.run(go)
    print(f"{'TABLE':<18}{'SQLITE':>9}{'POSTGRESQL':>12}")
    for table, (mine, theirs) in copied.counts.items():
        print(f"{table:<18}{mine:>9}{theirs:>12}{'' if mine == theirs else '  DIFFERENT'}")
    if not copied.matches:
        fail("the counts differ: keep using the SQLite store and report this")
        return 1
    print("copied; now set state.url (or ROUSSEAU_STATE_URL) to it and start the daemons")
    return 0
