"""Copy a rousseau-agent (Go) sessions.db into rousseau's store, SQLite or PostgreSQL (each
session through the store protocol's import_session).

The Go daemon keeps each session as one JSON payload row, the WhatsApp sender of a chat in
`jid_sessions`, and scheduled prompts in `cron_jobs` with a bare recipient (a WhatsApp JID
unless another transport ran the job). Sessions get ids derived from their Go ids, so a second
run finds them in place and imports nothing new. The jobs are only read here, as the Go
database keeps them: their schedules and targets are cron's to convert and check (the
`import-go` command adds them as `rousseau cron add` would).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from rousseau.agent import Content, Message, Role, StoreError, ToolResult, ToolUse
from rousseau.state.protocol import SessionStore
from rousseau.state.records import ImportedSession
from rousseau.state.store import Store, title_of

_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/sebastienrousseau/rousseau-agent")
_SESSION_COLUMNS = {"id", "title", "payload", "created_at", "updated_at"}
_BATCH = 100
"""Sessions read from the file at a time: their payloads can be large."""
UNKNOWN_OWNER = "rousseau-agent"
"""The owner prefix of sessions whose transport cannot be told: recalled only with scope all."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GoJob:
    """A rousseau-agent cron job as its database keeps it."""

    name: str
    expr: str
    """Its robfig/cron expression (`TZ=`, Go durations after `@every`)."""
    prompt: str
    recipient: str
    """A bare recipient: a WhatsApp JID, unless another transport ran the job."""
    enabled: bool


@dataclass(kw_only=True, slots=True)
class GoImport:
    """What one import did; a second run over the same file imports nothing new."""

    sessions: int = 0
    """Sessions copied by this run."""
    messages: int = 0
    """Messages in those sessions."""
    tool_calls: int = 0
    """Tool calls among those messages (their results came along with them)."""
    chats: int = 0
    """WhatsApp chats whose next message continues their imported session."""
    cron_jobs: int = 0
    """Cron jobs added by this run."""
    sessions_present: int = 0
    """Sessions an earlier run had copied already."""
    cron_present: int = 0
    """Cron jobs an earlier run had added already."""
    empty_sessions: int = 0
    """Sessions without a message, left out."""
    skipped: list[str] = field(default_factory=list)
    """One line per thing left out, or copied only in part, saying why."""
    jobs: list[GoJob] = field(default_factory=list)
    """The database's cron jobs, read but not added: adding them is cron's (its checks)."""


def session_id_for(go_id: str) -> str:
    """The rousseau id of a rousseau-agent session: the same on every run."""
    return uuid.uuid5(_NAMESPACE, go_id).hex[:12]


async def import_go_sessions(path: str | Path, store: SessionStore) -> GoImport:
    """Copy the sessions and messages of the rousseau-agent database at `path`, and read its
    cron jobs (into GoImport.jobs).

    The file is opened read-only and read on worker threads. Raises StoreError when the file
    is missing or is not a rousseau-agent database.
    """
    own = str(store.path) if isinstance(store, Store) and store.path != ":memory:" else None
    result = GoImport()
    go = await anyio.to_thread.run_sync(_open, path, own)
    try:
        tables, jids, sessions = await anyio.to_thread.run_sync(_start, go)
        while batch := await anyio.to_thread.run_sync(sessions.fetchmany, _BATCH):
            for row in batch:
                await _import_session(store, row, jids.get(row[0]), result)
        if "cron_jobs" in tables:
            result.jobs = await anyio.to_thread.run_sync(_jobs, go)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    finally:
        go.close()
    return result


def _start(go: sqlite3.Connection) -> tuple[set[str], dict[str, str], sqlite3.Cursor]:
    """The file's tables, its senders' sessions, and a cursor over its sessions."""
    tables = {r[0] for r in go.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    jids = _jids(go) if "jid_sessions" in tables else {}
    sessions = go.execute(
        "SELECT id, title, payload, created_at, updated_at FROM sessions ORDER BY created_at, id"
    )
    return tables, jids, sessions


def _jobs(go: sqlite3.Connection) -> list[GoJob]:
    jobs = go.execute(
        "SELECT name, cron_expr, prompt, deliver_to, enabled FROM cron_jobs"
        " ORDER BY created_at, name"
    )
    return [
        GoJob(
            name=str(name).strip(),
            expr=str(expr),
            prompt=str(prompt),
            recipient=str(recipient or ""),
            enabled=bool(enabled),
        )
        for name, expr, prompt, recipient, enabled in jobs
    ]


def _open(path: str | Path, own: str | None) -> sqlite3.Connection:
    """The file, read-only; never rousseau's own store (`own`, its path) by mistake."""
    source = Path(path).expanduser()
    if own is not None and source.exists() and source.samefile(own):
        raise StoreError(
            f"{source} is rousseau's own store (state.path); move the rousseau-agent database "
            "aside, point state.path elsewhere, and import the moved file"
        )
    if not source.is_file():
        raise StoreError(f"no rousseau-agent database at {source}")
    try:
        # Used by one worker thread at a time, whichever anyio picks: never at once.
        db = sqlite3.connect(
            f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=15.0, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {source}: {exc}") from None
    try:
        columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreError(f"{source} is not a SQLite database ({exc})") from None
    if not _SESSION_COLUMNS <= columns:
        db.close()
        what = "a rousseau store" if "summary" in columns else "no rousseau-agent sessions table"
        raise StoreError(f"{source} is not a rousseau-agent database ({what})")
    return db


def _jids(go: sqlite3.Connection) -> dict[str, str]:
    """The session each sender was last talking in, by session id."""
    return {
        str(sid): str(jid) for jid, sid in go.execute("SELECT jid, session_id FROM jid_sessions")
    }


# -- sessions -------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Left:
    """What a session's conversion could not carry over."""

    system: int = 0
    images: int = 0
    other: int = 0

    def describe(self) -> str:
        parts = []
        if self.images:
            parts.append(f"{self.images} image(s) kept as a placeholder")
        if self.system:
            parts.append(f"{self.system} system message(s) left out")
        if self.other:
            parts.append(f"{self.other} unreadable block(s) left out")
        return ", ".join(parts)


async def _import_session(
    store: SessionStore, row: tuple[Any, ...], jid: str | None, result: GoImport
) -> None:
    go_id, title = str(row[0]), str(row[1] or "")
    created = _epoch(row[3]) or time.time()
    left = _Left()
    messages = _messages(row[2], created, left)
    if messages is None:
        result.skipped.append(f"session {go_id}: its payload is not a readable session")
        return
    if not messages:
        result.empty_sessions += 1
        return
    # Only a chat's current session (the one jid_sessions names) is continued by its chat;
    # older ones carry the sender in their title.
    owner, chat, key = _scope(jid) if jid else (None, None, None)
    if jid is None and title.startswith("chat: "):
        owner, chat, _ = _scope(title.removeprefix("chat: ").strip())
    first_user = next((m.text for m, _ in messages if m.role is Role.USER and m.text), "")
    copied = await store.import_session(
        ImportedSession(
            id=session_id_for(go_id),
            title=title.strip() or title_of(first_user),
            created_at=created,
            updated_at=_epoch(row[4]) or messages[-1][1],
            owner=owner,
            chat=chat,
            messages=messages,
            chat_key=key,
        )
    )
    if not copied.copied:
        result.sessions_present += 1
        return
    if note := left.describe():
        result.skipped.append(f"session {go_id}: {note}")
    result.chats += copied.bound
    result.sessions += 1
    result.messages += len(messages)
    result.tool_calls += sum(len(m.tool_uses) for m, _ in messages)


def _messages(payload: Any, created: float, left: _Left) -> list[tuple[Message, float]] | None:
    """A session payload's messages with their times, or None if it cannot be read."""
    try:
        raw = json.loads(payload)
    except (TypeError, ValueError):
        return None
    items = raw.get("messages") if isinstance(raw, dict) else None
    if not isinstance(items or [], list):
        return None
    messages = []
    for item in items or []:
        message = _message(item, left) if isinstance(item, dict) else None
        if message is not None:
            messages.append((message, _epoch(item.get("created_at")) or created))
    return messages


def _message(raw: dict[str, Any], left: _Left) -> Message | None:
    role = raw.get("role")
    if role == "system":
        left.system += 1
        return None
    if role not in (Role.USER.value, Role.ASSISTANT.value):
        left.other += 1
        return None
    content = []
    for block in raw.get("content") or []:
        converted = _content(block) if isinstance(block, dict) else None
        if converted is None:
            left.other += 1
            continue
        if block.get("kind") == "image":
            left.images += 1
        content.append(converted)
    return Message(role=Role(role), content=content) if content else None


def _content(block: dict[str, Any]) -> Content | None:
    kind = block.get("kind")
    use, res = block.get("tool_use"), block.get("tool_result")
    if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
        return Content.of_text(block["text"])
    if kind == "tool_use" and isinstance(use, dict) and use.get("id") and use.get("name"):
        given = use.get("input")
        arguments = given if isinstance(given, dict) else {} if given is None else {"input": given}
        return Content.of_tool_use(
            ToolUse(id=str(use["id"]), name=str(use["name"]), input=arguments)
        )
    if kind == "tool_result" and isinstance(res, dict) and res.get("tool_use_id"):
        return Content.of_tool_result(
            ToolResult(
                tool_use_id=str(res["tool_use_id"]),
                content=str(res.get("output") or ""),
                is_error=bool(res.get("is_error")),
            )
        )
    if kind == "image":
        image = block.get("image")
        media = image.get("media_type") if isinstance(image, dict) else None
        return Content.of_text(f"[{media or 'an image'} sent here was not imported]")
    return None


def _scope(jid: str) -> tuple[str, str, str | None]:
    """Owner and chat of a sender's session, as the router records them, and the key under
    which the chat continues it (WhatsApp only: the other transports' ids look alike)."""
    user, at, server = jid.partition("@")
    phone = user.split(":")[0]
    if at and server == "s.whatsapp.net" and phone.isdigit():
        chat = f"whatsapp:{phone}@{server}"
        return f"whatsapp:{phone}", chat, chat
    unknown = f"{UNKNOWN_OWNER}:{jid}"
    return unknown, unknown, None


def _epoch(value: Any) -> float | None:
    """A Go time (RFC 3339, nanoseconds allowed) as epoch seconds; None for Go's zero time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() if moment.year > 1970 else None
