"""`rousseau version` and `rousseau status`."""

from __future__ import annotations

import argparse

from rousseau.cli.common import load, tokens, when


def version(args: argparse.Namespace) -> int:
    from rousseau import __version__

    print(f"rousseau {__version__}")
    return 0


def status(args: argparse.Namespace) -> int:
    from rousseau.agent import ConfigError
    from rousseau.providers import detect_provider
    from rousseau.state import Store

    config = load(args)
    print(f"config     {config.source or 'no file; defaults and environment'}")
    try:
        name, why = detect_provider(config)
        model = getattr(getattr(config, name), "model", "")
        print(f"provider   {name} {model} ({why})")
    except ConfigError as exc:
        print(f"provider   none: {exc}")
    if config.fallback:
        print(f"fallback   {', '.join(config.fallback)}")
    _daemon(config.state.path)
    with Store(config.state.path) as store:
        count, usage = store.totals_sync()
    print(f"store      {store.path}: {count} sessions")
    print(f"tokens     {tokens(usage)}")
    return 0


def _daemon(db: str) -> None:
    """Whether a daemon runs on this database, and its transports as it last published them."""
    from rousseau.state.lock import running

    info = running(db)
    if info is None:
        print("daemon     not running")
        return
    print(f"daemon     running, pid {info.pid}, since {when(info.started_at)}")
    for name, state in sorted(info.transports.items()):
        if "stopped" in state:
            print(f"  {name:<9} stopped: {state['stopped']}")
        else:
            print(f"  {name:<9} {'up' if state.get('connected') else 'down (reconnecting)'}")
