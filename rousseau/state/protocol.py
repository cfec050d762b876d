"""What the rest of rousseau needs of a session store, whichever database keeps it.

Two backends implement it: `Store` (SQLite, state/store.py, the default) and `PostgresStore`
(state/postgres.py, for several daemons sharing one database). tests/state/test_protocol.py
runs one suite against both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rousseau.agent import Role, Session, Usage
from rousseau.agent.protocols import AuditLog, MessageLog, ToolCallRecord
from rousseau.agents import DEFAULT_AGENT


@dataclass(kw_only=True, slots=True)
class SessionInfo:
    """A session as listed: no messages, just what identifies it and what it cost."""

    id: str
    title: str
    message_count: int
    created_at: float
    updated_at: float
    usage: Usage
    agent: str = DEFAULT_AGENT
    """The agent whose session it is."""


@dataclass(kw_only=True, slots=True)
class SearchHit:
    """A message found by `session search`, with its session's title."""

    session_id: str
    title: str
    role: Role
    text: str
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Recalled:
    """One message found by recall or search: where it is, who said it, and a snippet."""

    session_id: str
    role: str
    snippet: str
    created_at: float


class SessionStore(MessageLog, AuditLog, Protocol):
    """Sessions, their messages and usage, the audit trail, and full-text recall."""

    async def create_session(self, session_id: str | None = None, title: str = "") -> Session:
        """A new empty session (or the existing one of that id, untouched)."""
        ...

    async def load(self, session_id: str) -> Session | None:
        """The session's live messages (a summary first, if it was compacted)."""
        ...

    async def load_or_create(self, session_id: str) -> Session: ...

    async def get_external_session(self, session_id: str, provider: str) -> str | None:
        """A provider's own id for this session, if it has one."""
        ...

    async def set_external_session(self, session_id: str, provider: str, external: str) -> None: ...

    async def tool_calls(
        self, limit: int = 50, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        """The newest audit records first."""
        ...

    async def set_scope(
        self, session_id: str, *, owner: str | None, chat: str | None, agent: str = DEFAULT_AGENT
    ) -> None:
        """Whose session this is (None, None: the local user's) and which agent's."""
        ...

    async def recall(
        self,
        text: str,
        limit: int,
        *,
        exclude: str | None = None,
        scope_of: str | None = None,
        agent: str | None = None,
    ) -> list[Recalled]:
        """Messages about `text` (any of its telling words), best first; scope_of: only the
        sessions of that session's owner or chat; agent: only that agent's sessions."""
        ...

    async def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        ...

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        """Messages holding every word of `query` (each as a prefix), best first."""
        ...

    async def delete_session(self, session_id: str) -> bool: ...

    async def aclose(self) -> None: ...
