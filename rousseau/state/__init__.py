"""Durable state: the SQLite session store and its migrations."""

from rousseau.state.store import SearchHit, SessionInfo, Store, new_session_id

__all__ = ["SearchHit", "SessionInfo", "Store", "new_session_id"]
