"""`rousseau send TRANSPORT:RECIPIENT TEXT [--file PATH]`: one message (or file, the text its
caption) through a transport's outbox.

The message is queued like any reply (split for the platform), so a running daemon delivers
it, in order with whatever that chat still has waiting. With no daemon running, this command
delivers the chat's queue itself: on SQLite it takes the daemon's lock for the moment it
needs; on PostgreSQL it counts as a daemon while it sends (it beats, so its claims on the
parts hold), and only when none other lives.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import load, with_state

if TYPE_CHECKING:
    from rousseau.agent import Attachment
    from rousseau.config import Config
    from rousseau.media import BlobStore
    from rousseau.state.backend import Backend
    from rousseau.state.postgres_daemon import PostgresDaemonState
    from rousseau.state.protocol import DaemonStore
    from rousseau.transports.base import Transport


def send(args: argparse.Namespace) -> int:
    from rousseau.agent import ConfigError, RousseauError
    from rousseau.assembly import media_intake
    from rousseau.cron.targets import TargetError, parse_target
    from rousseau.transports import build_transports
    from rousseau.transports.abilities import TakesFiles

    try:
        name, chat = parse_target(args.target)
    except TargetError as exc:
        raise RousseauError(str(exc)) from None
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip() and args.file is None:
        raise RousseauError("the message is empty")
    config = load(args)
    if getattr(config, name, None) is None:
        raise ConfigError(f"{name} is not configured: add its section first")
    transport = build_transports(config, only=name)[name]
    media = media_intake(config, transcribing=False)  # it only sends
    if isinstance(transport, TakesFiles):
        transport.bind_media(media)
    attachment = _stored(args.file, transport, media.blobs) if args.file is not None else None
    queue = functools.partial(_queue, transport, chat, text, attachment)
    return with_state(config, functools.partial(_send, config, transport, chat, args.target, queue))


async def _send(
    config: Config,
    transport: Transport,
    chat: str,
    target: str,
    queue: Callable[[DaemonStore], Awaitable[int]],
    backend: Backend,
) -> int:
    """Queue the message; deliver the chat's queue here unless a daemon runs to do it."""
    from rousseau.state.postgres_daemon import PostgresDaemonState

    queued = await queue(backend.state)
    if isinstance(backend.state, PostgresDaemonState):
        sent = await _deliver_as_member(config, backend.state, transport, chat)
    else:
        sent = await _deliver_unless_running(config, backend.state, transport, chat)
    if sent is None:
        print(f"queued {queued} part(s) for {target}; the running daemon delivers them")
    else:
        print(f"sent {sent} part(s) to {target}")
    return 0


async def _deliver_unless_running(
    config: Config, state: DaemonStore, transport: Transport, chat: str
) -> int | None:
    """SQLite: deliver holding the daemon's lock; None when a daemon holds it (and
    delivers)."""
    import anyio

    from rousseau.state.lock import DaemonLock, DaemonRunningError

    lock = DaemonLock(config.state.path)
    try:
        await anyio.to_thread.run_sync(lock.acquire)
    except DaemonRunningError:
        await _quiet_close(transport)
        return None
    try:
        return await _deliver(config, state, transport, chat)
    finally:
        lock.release()


async def _deliver_as_member(
    config: Config, state: PostgresDaemonState, transport: Transport, chat: str
) -> int | None:
    """PostgreSQL: deliver as a daemon of the cluster, beating while it sends, so a daemon
    started meanwhile leaves the parts taken here alone (they are free again at the end);
    None when a daemon lives (and delivers)."""
    import anyio

    if await state.daemons():
        await _quiet_close(transport)
        return None
    await state.beat()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(state.beating)
            sent = await _deliver(config, state, transport, chat)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await state.leave()
    return sent


def _stored(path: str, transport: Transport, blobs: BlobStore) -> Attachment:
    """The file, checked against what the transport can send, in the blob store."""
    from pathlib import Path

    from rousseau.agent import RousseauError
    from rousseau.media import media_type_of
    from rousseau.transports.abilities import Abilities

    limit = Abilities.of(transport).max_file_bytes
    if not limit:
        raise RousseauError(f"{transport.name} cannot send files")
    file = Path(path).expanduser()
    try:
        size = file.stat().st_size
        if size > limit:
            raise RousseauError(f"{path} is {size:,} bytes; {transport.name} sends up to {limit:,}")
        data = file.read_bytes()
    except OSError as exc:
        raise RousseauError(f"cannot read {path}: {exc.strerror or exc}") from None
    return blobs.put_sync(data, media_type=media_type_of(name=file.name), name=file.name)


async def _queue(
    transport: Transport, chat: str, text: str, attachment: Attachment | None, state: DaemonStore
) -> int:
    from rousseau.messages import Outbound
    from rousseau.transports.split import split_message

    if attachment is not None:  # the text is its caption
        parts = [Outbound(transport=transport.name, chat_id=chat, text=text, attachment=attachment)]
    else:
        parts = [
            Outbound(transport=transport.name, chat_id=chat, text=part)
            for part in split_message(text, transport.max_length, transport.measure)
        ]
    await state.finish(None, parts)
    return len(parts)


async def _deliver(config: Config, state: DaemonStore, transport: Transport, chat: str) -> int:
    """Send this chat's queue, oldest first; a failure leaves the rest for the next daemon."""
    import anyio

    from rousseau.agent import RousseauError

    sent = 0
    try:
        for row in await state.due(transport.name, 1000):
            if row.message.chat_id != chat:
                continue
            try:
                with anyio.fail_after(config.send_timeout):
                    await transport.send(row.message)
            except Exception as exc:
                reason = str(exc) or type(exc).__name__
                if isinstance(exc, TimeoutError):
                    reason = f"no answer within {config.send_timeout:g} s"
                await state.retry_later(row.id, 0.0, reason, give_up=False)
                raise RousseauError(
                    f"{transport.name} did not take it ({reason}); it stays queued"
                    " and the daemon delivers it when it runs"
                ) from None
            await state.sent(row.id)
            sent += 1
    finally:
        with anyio.CancelScope(shield=True):
            await _quiet_close(transport)
    return sent


async def _quiet_close(transport: Any) -> None:
    try:
        await transport.aclose()
    except Exception:  # closing after a failure: the failure is what the user must see
        pass
