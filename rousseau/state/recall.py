"""Full-text recall over every stored message (SQLite FTS5, ranked by bm25).

User text never reaches FTS5's query syntax: it is cut into words and each word is quoted,
so quotes, `AND`, `*`, `NEAR` or column filters in a message are only words.
"""

from __future__ import annotations

import re
import sqlite3
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from rousseau.agent import Role, Session
from rousseau.state.store import Store

Scope = Literal["sender", "all"]
MAX_TERMS = 16
_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an and are as at be but by can could did do does for from had has have he her him his how"
    " i if in into is it its me my no not of on or our she so than that the their them then there"
    " these they this to us was we were what when where which who why will with would you your"
    " about just please tell know remember".split()
)


def fts_query(text: str, *, recall: bool = True, max_terms: int = MAX_TERMS) -> str | None:
    """An FTS5 query from free text, or None if it has no words.

    recall: any of the words, stop words dropped (what a message is about); otherwise every
    word as a prefix (what a person searching types)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        word = word.strip("_")
        if word and not (recall and (word in _STOP or (len(word) < 2 and not word.isdigit()))):
            seen.setdefault(word, None)
    if recall:  # the longest words are the most telling; keep the query short
        return (
            " OR ".join(f'"{w}"' for w in sorted(seen, key=len, reverse=True)[:max_terms]) or None
        )
    return " AND ".join(f'"{w}"*' for w in list(seen)[:max_terms]) or None


@dataclass(frozen=True, kw_only=True, slots=True)
class Recalled:
    session_id: str
    role: str
    snippet: str
    created_at: float


def search_op(
    query: str,
    limit: int,
    *,
    recall: bool = True,
    exclude: str | None = None,
    scope_of: str | None = None,
) -> Callable[[sqlite3.Connection], list[Recalled]]:
    """The store operation behind recall and `session search`; scope_of: a session whose
    owner's (or chat's) sessions are the only ones searched."""
    match = fts_query(query, recall=recall)

    def op(db: sqlite3.Connection) -> list[Recalled]:
        if match is None:
            return []
        where = ""
        args: list[object] = [match]
        if exclude is not None:
            where += " AND m.session_id != ?"
            args.append(exclude)
        if scope_of is not None:
            owner, chat = db.execute(
                "SELECT owner, chat FROM sessions WHERE id = ?", (scope_of,)
            ).fetchone() or (None, None)
            if owner is None and chat is None:  # the local user's sessions
                where += " AND s.owner IS NULL AND s.chat IS NULL"
            else:
                where += " AND (s.owner = ? OR s.chat = ?)"
                args += [owner, chat]
        rows = db.execute(
            "SELECT m.session_id, m.role, snippet(messages_fts, 0, '', '', ' … ', 24),"
            " m.created_at FROM messages_fts f JOIN messages m ON m.id = f.rowid"
            " JOIN sessions s ON s.id = m.session_id"
            f" WHERE messages_fts MATCH ? {where} ORDER BY f.rank LIMIT ?",
            (*args, limit),
        )
        return [
            Recalled(session_id=r[0], role=r[1], snippet=" ".join(r[2].split()), created_at=r[3])
            for r in rows
        ]

    return op


def last_user_text(session: Session) -> str:
    for message in reversed(session.messages):
        if message.role is Role.USER and message.text.strip():
            return message.text
    return ""


class SQLiteRecall:
    """A RecallProvider: top-k snippets from other sessions about the newest user message."""

    HEADER = "Possibly relevant, from earlier conversations (may be out of date):"

    def __init__(
        self, store: Store, top_k: int = 5, scope: Scope = "sender", cache: int = 256
    ) -> None:
        self.store = store
        self.top_k = top_k
        self.scope = scope
        self._cache: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._cache_size = cache

    async def recall(self, session: Session, text: str) -> list[Recalled]:
        op = search_op(
            text,
            self.top_k,
            exclude=session.id,
            scope_of=session.id if self.scope == "sender" else None,
        )
        return await self.store.call(op)

    async def appendix(self, session: Session) -> str:
        text = last_user_text(session)
        if not text:
            return ""
        key = (session.id, text)
        if key in self._cache:  # the loop asks once per iteration of a turn
            self._cache.move_to_end(key)
            return self._cache[key]
        hits = await self.recall(session, text)
        lines = [
            f"- {datetime.fromtimestamp(h.created_at):%Y-%m-%d} ({h.role}): {h.snippet}"
            for h in hits
        ]
        result = "\n".join([self.HEADER, *lines]) if lines else ""
        self._cache[key] = result
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return result
