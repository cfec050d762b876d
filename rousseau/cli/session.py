"""`rousseau session`: listing, searching, showing and deleting stored sessions."""

from __future__ import annotations

import argparse

from rousseau.cli.common import fail, open_store, tokens, when


def list_sessions(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        sessions = store.list_sync(args.limit)
    if not sessions:
        print("no sessions yet")
        return 0
    print(f"{'ID':<14}{'MESSAGES':>9}  {'UPDATED':<17} TITLE")
    for s in sessions:
        print(f"{s.id:<14}{s.message_count:>9}  {when(s.updated_at):<17} {s.title}")
    return 0


def search(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        hits = store.search_sync(args.query, args.limit)
    if not hits:
        print(f"no messages contain {args.query!r}")
        return 0
    for h in hits:
        text = " ".join(h.text.split())
        print(f"{h.session_id}  {when(h.created_at)}  {h.role.value}: {text[:120]}")
    return 0


def show(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError
    from rousseau.agents import DEFAULT_AGENT
    from rousseau.transports.terminal import describe_call

    with open_store(args) as store:
        session_id = store.resolve_sync(args.id)
        session = store.load_sync(session_id)
        info = store.info_sync(session_id)
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
    print(f"-- {info.message_count} messages{held}; tokens: {tokens(info.usage)}")
    return 0


def delete(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError

    with open_store(args) as store:
        session_id = store.resolve_sync(args.id)
        if not args.yes:
            fail(f"this deletes session {session_id} and all its messages; add --yes to confirm")
            return 2
        deleted = store.delete_sync(session_id)
    if not deleted:
        raise StoreError(f"no such session: {args.id}")
    print(f"deleted session {session_id}")
    return 0
