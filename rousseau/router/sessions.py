"""The session of each chat: kept in memory between turns, else loaded from the store, else
made and bound to the chat (DESIGN.md section 1, step 5)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import structlog

from rousseau.agent import Session
from rousseau.messages import Inbound
from rousseau.router.settings import RouterSettings
from rousseau.state import SessionStore
from rousseau.state.protocol import DaemonStore

log = structlog.get_logger("rousseau.router")


class _SessionCache:
    """Sessions kept in memory between turns, least recently used first, and the messages
    they hold. A session grows only in its own turn, so its messages are counted as it is
    taken for the next one: keeping the bound never walks every session (that walk, at each
    message, cost 2% of its CPU with 160 chats). The count lags by each session's last turn."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._counted: dict[str, int] = {}
        self.held = 0
        """The messages counted in all."""

    def __len__(self) -> int:
        return len(self._sessions)

    def take(self, key: str) -> Session | None:
        """The session of `key`, now the most recently used, or None."""
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            self._count(key, session)
        return session

    def put(self, key: str, session: Session) -> None:
        self.pop(key)
        self._sessions[key] = session
        self._count(key, session)

    def pop(self, key: str) -> None:
        if self._sessions.pop(key, None) is not None:
            self.held -= self._counted.pop(key)

    def trim(self, sessions: int, messages: int) -> None:
        """Drop the least recently used until at most `sessions` hold at most `messages`
        (the newest is always kept)."""
        while len(self._sessions) > 1 and (len(self._sessions) > sessions or self.held > messages):
            key, _ = self._sessions.popitem(last=False)
            self.held -= self._counted.pop(key)

    def _count(self, key: str, session: Session) -> None:
        count = len(session.messages)
        self.held += count - self._counted.get(key, 0)
        self._counted[key] = count


class Sessions:
    """Which session a message belongs to, and a fresh one when the chat asks (`/new`)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        state: DaemonStore,
        settings: RouterSettings,
        new_session_id: Callable[[], str],
    ) -> None:
        self._store = store
        self._state = state
        self._settings = settings
        self._new_session_id = new_session_id
        self._cache = _SessionCache()

    def __len__(self) -> int:
        """Sessions held in memory."""
        return len(self._cache)

    def forget(self, key: str) -> None:
        """Drop the session of `key` from memory: what is there may not be what is on disk
        (a failed turn, or another daemon's turn), so the next turn reloads it."""
        self._cache.pop(key)

    async def get(self, inbound: Inbound) -> Session:
        """The session of the message's chat, made and bound if it has none yet."""
        key = inbound.session_key
        cached = self._cache.take(key)
        if cached is not None:
            self._trim()
            return cached
        session_id = await self._state.session_for(key)
        session = await self._store.load(session_id) if session_id else None
        if session is None:
            session = await self._store.create_session(session_id or self._new_session_id())
            await self._bind(inbound, session.id)
        self._cache.put(key, session)
        self._trim()
        return session

    async def new(self, inbound: Inbound) -> Session:
        """A fresh session for the message's chat, from now on its session."""
        session = await self._store.create_session(self._new_session_id())
        await self._bind(inbound, session.id)
        self._cache.put(inbound.session_key, session)
        log.info("router.new_session", session=session.id)
        return session

    def _trim(self) -> None:
        self._cache.trim(self._settings.session_cache, self._settings.session_cache_messages)

    async def _bind(self, inbound: Inbound, session_id: str) -> None:
        # Recall in a private chat may search its person's other private chats; a group's
        # session belongs to the group, so nobody's private memory surfaces there.
        chat = f"{inbound.transport}:{inbound.chat_id}"
        owner = chat if inbound.is_group else f"{inbound.transport}:{inbound.sender_id}"
        await self._state.bind_session(
            inbound.session_key, session_id, owner=owner, chat=chat, agent=inbound.agent
        )
