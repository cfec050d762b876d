"""`rousseau backup create [PATH] | verify PATH | restore PATH`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rousseau.cli.common import load


def create(args: argparse.Namespace) -> int:
    import anyio

    from rousseau.state.backup import create as make
    from rousseau.state.backup import default_name

    config = load(args)
    target = Path(args.path) if args.path else default_name(Path(config.backup.dir).expanduser())
    manifest = anyio.run(lambda: make(config, target, with_secrets=args.with_secrets))
    rows = ", ".join(
        f"{n} {manifest.rows[n]}"
        for n in ("sessions", "messages", "cron_jobs")
        if n in manifest.rows
    )
    media = sum(1 for n in manifest.parts if n.startswith("media/"))
    keys = len(manifest.keys)
    print(f"backed up to {target.expanduser()}: {rows}, {media} media files, {keys} key files")
    if args.with_secrets:
        print("it holds the config's secrets (mode 0600): keep it as safe as the config")
    else:
        print("the config's secrets are not in it: a restore needs them again")
    return 0


def verify(args: argparse.Namespace) -> int:
    from rousseau.state.backup import verify as check

    checked = check(Path(args.path))
    manifest = checked.manifest
    print(f"backup of a {manifest.backend} store (schema {manifest.schema}), every part intact")
    for table, count in sorted(checked.rows.items()):
        print(f"  {table:<16}{count:>9}")
    print(f"  {'media files':<16}{checked.media:>9}")
    print(f"  {'key store files':<16}{checked.keys:>9}")
    print(f"  config          {'with its secrets' if manifest.with_secrets else 'without secrets'}")
    return 0


def restore(args: argparse.Namespace) -> int:
    import anyio

    from rousseau.state.backup import BackupError
    from rousseau.state.backup import restore as put_back
    from rousseau.state.lock import running

    config = load(args)
    url = args.database or (config.state.url.get_secret_value() if config.state.url else None)
    state = None if url else Path(args.state or config.state.path).expanduser()
    if args.state:
        state, url = Path(args.state).expanduser(), None
    if state is not None and running(state) is not None:
        raise BackupError(f"a daemon runs on {state}: stop it first, or restore elsewhere")
    if url is not None:
        from rousseau.state.backup_postgres import refuse_live_cluster

        anyio.run(refuse_live_cluster, url)
    checked = anyio.run(lambda: put_back(Path(args.path), config, state_path=state, url=url))
    where = str(state) if state is not None else "the database"
    print(
        f"restored into {where}: " + ", ".join(f"{t} {n}" for t, n in sorted(checked.rows.items()))
    )
    print(f"  media files {checked.media} (into {config.state.media_folder()})")
    if not checked.manifest.with_secrets:
        print("  the backup kept no secrets: give the config its tokens again before starting")
    return 0
