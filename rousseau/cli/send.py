"""`rousseau send TRANSPORT:RECIPIENT TEXT [--file PATH]`: one message (or file, the text its
caption) through a transport's outbox.

The message is queued like any reply (split for the platform), so a running daemon delivers
it, in order with whatever that chat still has waiting. With no daemon running, this command
takes the daemon's lock for the moment it needs and delivers the chat's queue itself.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import load, open_store

if TYPE_CHECKING:
    from rousseau.agent import Attachment
    from rousseau.config import Config
    from rousseau.media import BlobStore
    from rousseau.state import Store
    from rousseau.transports.base import Transport


def send(args: argparse.Namespace) -> int:
    import anyio

    from rousseau.agent import ConfigError, RousseauError
    from rousseau.assembly import media_intake
    from rousseau.cron.targets import TargetError, parse_target
    from rousseau.state.lock import DaemonLock, DaemonRunningError
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
    with open_store(args, config) as store:
        queued = anyio.run(_queue, store, transport, chat, text, attachment)
        lock = DaemonLock(config.state.path)
        try:
            lock.acquire()
        except DaemonRunningError:
            print(f"queued {queued} part(s) for {args.target}; the running daemon delivers them")
            return 0
        try:
            sent = anyio.run(_deliver, config, store, transport, chat)
        finally:
            lock.release()
    print(f"sent {sent} part(s) to {args.target}")
    return 0


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
    store: Store, transport: Transport, chat: str, text: str, attachment: Attachment | None
) -> int:
    from rousseau.messages import Outbound
    from rousseau.state.daemon_state import DaemonState
    from rousseau.transports.split import split_message

    if attachment is not None:  # the text is its caption
        parts = [Outbound(transport=transport.name, chat_id=chat, text=text, attachment=attachment)]
    else:
        parts = [
            Outbound(transport=transport.name, chat_id=chat, text=part)
            for part in split_message(text, transport.max_length, transport.measure)
        ]
    await DaemonState(store).finish(None, parts)
    return len(parts)


async def _deliver(config: Config, store: Store, transport: Transport, chat: str) -> int:
    """Send this chat's queue, oldest first; a failure leaves the rest for the next daemon."""
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.state.daemon_state import DaemonState

    state = DaemonState(store)
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
