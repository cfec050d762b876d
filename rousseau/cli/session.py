"""`rousseau session`: listing, searching, showing and deleting stored sessions."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import fail, on_state, tokens, when

if TYPE_CHECKING:
    from rousseau.state.backend import Backend


def list_sessions(args: argparse.Namespace) -> int:
    sessions = on_state(args, lambda backend: backend.store.list_sessions(args.limit))
    if not sessions:
        print("no sessions yet")
        return 0
    print(f"{'ID':<14}{'MESSAGES':>9}  {'UPDATED':<17} TITLE")
    listed = {s.id for s in sessions}
    helpers: dict[str | None, list[Any]] = {}
    for s in sessions:  # a helper under its parent, where its parent is listed too
        helpers.setdefault(s.parent if s.parent in listed else None, []).append(s)

    def put(s: Any, depth: int) -> None:
        title = "  " * depth + ("↳ " if depth else "") + s.title
        print(f"{s.id:<14}{s.message_count:>9}  {when(s.updated_at):<17} {title}")
        for child in helpers.get(s.id, []):
            put(child, depth + 1)

    for s in helpers.get(None, []):
        put(s, 0)
    return 0


def search(args: argparse.Namespace) -> int:
    hits = on_state(args, lambda backend: backend.store.search(args.query, args.limit))
    if not hits:
        print(f"no messages contain {args.query!r}")
        return 0
    for h in hits:
        text = " ".join(h.text.split())
        print(f"{h.session_id}  {when(h.created_at)}  {h.role.value}: {text[:120]}")
    return 0


def show(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.cli.terminal import describe_call
    from rousseau.messages import DEFAULT_AGENT

    async def read(backend: Backend) -> tuple[Any, Any, Any]:
        session_id = await backend.store.resolve(args.id)
        store = backend.store
        found = await store.load(session_id), await store.info(session_id)
        return *found, await store.children(session_id)

    session, info, helpers = on_state(args, read)
    if session is None or info is None:
        raise StoreError(f"no such session: {args.id}")
    for message in session.messages:
        for c in message.content:
            if c.text:
                print(f"{message.role.value}: {c.text}")
            elif c.tool_use is not None:
                print(f"  > {describe_call(c.tool_use)}")
            elif c.tool_result is not None:
                first = (c.tool_result.content.strip().splitlines() or [""])[0][:100]
                print(f"  {'!' if c.tool_result.is_error else '='} {first}")
            elif c.attachment is not None:
                print(f"{message.role.value}: {c.attachment.stand_in()}")
    files = sum(len(m.attachments) for m in session.messages)
    held = f"; {files} file{'s' if files != 1 else ''}" if files else ""
    if info.agent != DEFAULT_AGENT:  # one daemon, several agents: whose conversation
        held += f"; agent {info.agent}"
    if info.parent is not None:
        held += f"; delegated by session {info.parent}"
    print(f"-- {info.message_count} messages{held}; tokens: {tokens(info.usage)}")
    for helper in helpers:
        print(f"-- helper session {helper.id}: {helper.title}")
    return 0


def delete(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError

    async def remove(backend: Backend) -> tuple[str, bool | None]:
        session_id = await backend.store.resolve(args.id)
        if not args.yes:
            return session_id, None
        return session_id, await backend.store.delete_session(session_id)

    session_id, deleted = on_state(args, remove)
    if deleted is None:
        fail(f"this deletes session {session_id} and all its messages; add --yes to confirm")
        return 2
    if not deleted:
        raise StoreError(f"no such session: {args.id}")
    print(f"deleted session {session_id}")
    return 0
