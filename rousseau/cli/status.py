"""`rousseau version` and `rousseau status`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rousseau.cli.common import load, on_state, tokens, when

if TYPE_CHECKING:
    from rousseau.agent import Usage
    from rousseau.config import Config
    from rousseau.state.backend import Backend


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
    if config.agents or config.routes:
        _agents(config)
    daemon_status(config.state.path)
    if config.state.url is not None:
        count, usage = on_state(args, _cluster, config)
    else:
        with Store(config.state.path) as store:
            count, usage = store.totals_sync()
        print(f"store      {store.path}: {count} sessions")
    print(f"tokens     {tokens(usage)}")
    return 0


async def _cluster(backend: Backend) -> tuple[int, Usage]:
    """The PostgreSQL store, its daemons and which one polls each single-poller transport."""
    from psycopg.conninfo import conninfo_to_dict

    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_daemon import PostgresDaemonState

    store, state = backend.store, backend.state
    assert isinstance(store, PostgresStore) and isinstance(state, PostgresDaemonState)
    where = conninfo_to_dict(store.url)
    count, usage = await store.totals()
    print(
        f"store      postgresql {where.get('host', 'localhost')}:{where.get('port', 5432)}"
        f"/{where.get('dbname', '')}: {count} sessions"
    )
    daemons = await state.daemons()
    print(f"cluster    {len(daemons)} daemon{'s' if len(daemons) != 1 else ''} alive")
    for name, beat, config in daemons:
        print(f"  {name:<28} last beat {when(beat)}, config {config or '?'}")
    alive = {name for name, _, _ in daemons}
    for transport, holder in sorted((await state.pollers()).items()):
        print(f"  {transport:<9} polled by {holder}{'' if holder in alive else ' (gone)'}")
    return count, usage


def _agents(config: Config) -> None:
    """Each agent in a line, then the routing table in the order it is tried."""
    from rousseau.messages import DEFAULT_AGENT

    for name in dict.fromkeys((DEFAULT_AGENT, *config.agents)):
        agent = config.for_agent(name).agent
        what = (
            [f"{agent.provider or ''} {agent.model or ''}".strip()]
            if config.own_provider(name)
            else []
        )
        what.append(f"workspace {agent.workspace}")
        what.append(f"tools {', '.join(agent.tools)}" if agent.tools is not None else "all tools")
        print(f"agent      {name}: {'; '.join(w for w in what if w)}")
    for i, route in enumerate(config.routes):
        matched = [
            f"{field}={getattr(route, field)}"
            for field in ("transport", "chat", "sender", "thread")
            if getattr(route, field) != "*"
        ]
        print(f"route {i:<4} {' '.join(matched) or 'everything'} -> {route.agent}")
    for name, section in config.transport_sections().items():
        if section.agent is not None:
            print(f"route      the rest of {name} -> {section.agent}")
    print(f"route      the rest -> {config.default_agent}")


def daemon_status(db: str) -> bool:
    """Print whether a daemon runs on this database, and its transports as it last
    published them; True if one runs."""
    from rousseau.state.lock import running

    info = running(db)
    if info is None:
        print("daemon     not running")
        return False
    print(f"daemon     running, pid {info.pid}, since {when(info.started_at)}")
    if info.config.get("digest"):
        print(f"  config   {info.config['digest']}" + _reloaded(info.config))
    for name, state in sorted(info.transports.items()):
        if "stopped" in state:
            print(f"  {name:<9} stopped: {state['stopped']}")
        else:
            print(f"  {name:<9} {'up' if state.get('connected') else 'down (reconnecting)'}")
    return True


def _reloaded(config: dict[str, object]) -> str:
    """How the last reload went, as `status` shows it after the config's digest."""
    if "at" not in config:
        return ""
    at = float(config["at"])  # type: ignore[arg-type]
    if config.get("ok"):
        return f" (reloaded {when(at)})"
    return f" (a reload {when(at)} was refused: {config.get('error', '')})"
