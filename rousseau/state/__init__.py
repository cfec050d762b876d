"""Durable state: sessions and messages, the daemon's inbox and outbox, cron, recall."""

from rousseau.state.protocol import SearchHit, SessionInfo, SessionStore
from rousseau.state.store import Store, new_session_id

__all__ = ["SearchHit", "SessionInfo", "SessionStore", "Store", "new_session_id"]
