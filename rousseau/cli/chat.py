"""`rousseau chat`: the terminal chat, one message (-m) or interactive."""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import close_provider, fail, load, state_folder, with_state
from rousseau.messages import DEFAULT_AGENT

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.state import SessionStore
    from rousseau.state.backend import Backend


def chat(args: argparse.Namespace) -> int:
    from rousseau.assembly import agent_config
    from rousseau.providers import detect_provider

    # The interactive chat keeps log lines out of the conversation: they go to a file.
    log_to = None if args.message is not None else state_folder() / "chat.log"
    config = load(args, log_to=log_to)
    name, _why = detect_provider(config)
    if (why := config.unknown_agent(args.agent)) is not None:
        fail(f"--agent: {why}")
        return 2
    if args.agent != DEFAULT_AGENT:
        config, name = agent_config(config, args.agent, name)
    return with_state(config, functools.partial(_chat, config, args, name))


async def _chat(config: Config, args: argparse.Namespace, name: str, backend: Backend) -> int:
    """The chat on the configured state (SQLite's file or PostgreSQL), through the store
    protocol: its sessions are the daemons' own, listed and recalled with theirs; its turns
    answer the local user, whose profile the agent keeps."""
    from rousseau.messages import LOCAL_USER, turn_person
    from rousseau.providers import build_provider

    turn_person.set(LOCAL_USER)
    provider = build_provider(config, name, store=backend.store)
    if args.message is not None:
        return await _chat_once(config, provider, backend, args)
    await _chat_interactive(config, provider, backend, args, name)
    return 0


async def _open_session(store: SessionStore, args: argparse.Namespace) -> Any:
    if args.session:
        session = await store.load_or_create(args.session)
    else:
        session = await store.create_session()
    if args.agent != DEFAULT_AGENT:  # the local user's session, in that agent's memory
        await store.set_scope(session.id, owner=None, chat=None, agent=args.agent)
    return session


async def _chat_once(
    config: Config, provider: Any, backend: Backend, args: argparse.Namespace
) -> int:
    from rousseau.agent import RousseauError
    from rousseau.assembly import connected_agent
    from rousseau.cli.terminal import default_screen, run_turn

    store = backend.store
    session = await _open_session(store, args)
    screen = default_screen(interactive=False)
    try:
        async with connected_agent(config, provider, backend, name=args.agent) as agent:
            await run_turn(agent, session, args.message, screen)
    except RousseauError as exc:
        fail(str(exc))
        return 1
    finally:
        await close_provider(provider)
    return 0


async def _chat_interactive(
    config: Config, provider: Any, backend: Backend, args: argparse.Namespace, name: str
) -> None:
    from rousseau.assembly import connected_agent
    from rousseau.cli.terminal import (
        HELP,
        LineReader,
        TerminalApproval,
        default_screen,
        interactive,
    )

    store = backend.store
    screen = default_screen(interactive=True)
    reader = LineReader()
    session = await _open_session(store, args)
    model = getattr(provider, "model", "")
    banner = screen.paint.dim(
        f"rousseau · {name} {model} · session {session.id}\n{HELP} Ctrl-C stops a reply."
        f"\nLog lines go to {state_folder() / 'chat.log'}."
    )
    ask = TerminalApproval(reader, screen)
    try:
        async with connected_agent(config, provider, backend, ask=ask, name=args.agent) as agent:
            await interactive(agent, store, session, screen, reader, banner)
    finally:
        await close_provider(provider)
