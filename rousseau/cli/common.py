"""What every command shares: loading the config, opening the store, one-line errors."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.log import Redactor
    from rousseau.state.backend import Backend

T = TypeVar("T")


redactor: Redactor | None = None
"""Masks the loaded config's secrets (and token shapes) in what the CLI prints on failure."""


def first_cause(exc: BaseException) -> BaseException:
    """The first error of an exception group that says most: ours first, then any other."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [first_cause(e) for e in exc.exceptions]
    from rousseau.agent.errors import RousseauError

    for wanted in (KeyboardInterrupt, RousseauError, BrokenPipeError):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0]


def fail(message: str) -> None:
    """One line on stderr, secrets masked."""
    from rousseau.log import Redactor

    message = (redactor or Redactor()).redact(message)
    line = " ".join(message.split())
    print(f"rousseau: {line}", file=sys.stderr)


def load(args: argparse.Namespace, *, quiet: bool = True, log_to: Path | None = None) -> Config:
    """Load the config and set up logging (warnings only for interactive commands), on
    stderr or appended to the file `log_to`."""
    from rousseau.config import load_config, log_notices
    from rousseau.log import configure_logging
    from rousseau.private import private_folder

    global redactor
    config = load_config(args.config)
    level = "debug" if args.debug else ("warning" if quiet else config.log.level)
    file = None
    if log_to is not None:
        private_folder(log_to.parent)
        fd = os.open(log_to, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        file = os.fdopen(fd, "a", buffering=1)  # line-buffered; open until the process ends
    redactor = configure_logging(level, config.log.format, config.secrets(), file)
    log_notices(config)  # keys written for rousseau-agent (Go), each with what we do instead
    return config


def state_folder() -> Path:
    """Where the CLI keeps its own files: $XDG_STATE_HOME/rousseau (~/.local/state)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rousseau"


def on_state(
    args: argparse.Namespace, use: Callable[[Backend], Awaitable[T]], config: Config | None = None
) -> T:
    """`use` the configured state (SQLite's file or PostgreSQL), opened for this command
    alone and closed after it."""
    return with_state(config or load(args), use)


def with_state(config: Config, use: Callable[[Backend], Awaitable[T]]) -> T:
    """`on_state` for a config already loaded."""
    import anyio

    from rousseau.state.backend import open_backend

    async def main() -> T:
        backend = await open_backend(config, daemon=False)
        try:
            return await use(backend)
        finally:
            await backend.aclose()

    return anyio.run(main)


def when(ts: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def tokens(usage: Any) -> str:
    return (
        f"{usage.input_tokens:,} in, {usage.output_tokens:,} out, "
        f"{usage.cache_read_tokens:,} cache read, {usage.cache_write_tokens:,} cache write"
    )


async def close_provider(provider: Any) -> None:
    import anyio

    from rousseau.assembly import SupportsAclose

    if isinstance(provider, SupportsAclose):
        with anyio.CancelScope(shield=True):
            await provider.aclose()
