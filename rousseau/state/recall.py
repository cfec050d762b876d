"""Full-text recall over every stored message (SQLite FTS5, ranked by bm25).

User text never reaches FTS5's query syntax: it is cut into words and each word is quoted,
so quotes, `AND`, `*`, `NEAR` or column filters in a message are only words.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import anyio

from rousseau.agent import Role, Session
from rousseau.messages import DEFAULT_AGENT
from rousseau.state.protocol import Recalled, SessionStore

if TYPE_CHECKING:
    from rousseau.state.hybrid import VectorRecall

Scope = Literal["sender", "all"]
MAX_TERMS = 16
CANDIDATES = 2_000  # the most messages one recall query may have to rank
PROBED = 2 * MAX_TERMS  # words of one message whose frequency is looked up, at most
RANKED = 500  # the best-ranked matches that are then filtered by session and scope
_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an and are as at be but by can could did do does for from had has have he her him his how"
    " i if in into is it its me my no not of on or our she so than that the their them then there"
    " these they this to us was we were what when where which who why will with would you your"
    " about just please tell know remember".split()
)


def words_of(text: str, *, recall: bool) -> list[str]:
    """The distinct words of a text, as the index spells them (lower case, no accents);
    for recall without stop words and single letters."""
    plain = "".join(
        c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c)
    )
    seen: dict[str, None] = {}
    for word in _WORD.findall(plain):
        word = word.strip("_")
        if word and not (recall and (word in _STOP or (len(word) < 2 and not word.isdigit()))):
            seen.setdefault(word, None)
    return list(seen)


def fts_query(text: str, *, recall: bool = True, max_terms: int = MAX_TERMS) -> str | None:
    """An FTS5 query from free text, or None if it has no words.

    recall: any of the words (what a message is about); otherwise every word as a prefix
    (what a person searching types). Each word is quoted: no FTS5 syntax gets through."""
    words = words_of(text, recall=recall)[:max_terms]
    if recall:
        return any_of(words)
    return " AND ".join(f'"{w}"*' for w in words) or None


def any_of(words: list[str]) -> str | None:
    """An FTS5 query matching any of the words, each quoted."""
    return " OR ".join(f'"{w}"' for w in words) or None


def telling_words(db: sqlite3.Connection, words: list[str]) -> list[str]:
    """The rarest of `words` whose matches together stay under CANDIDATES: common words say
    little about a message, and ranking their matches would scan much of the index. Each
    word's count is taken up to the cap only, so asking costs little even for common ones;
    and only the PROBED longest words are asked about, however long the message."""
    counts: dict[str, int] = {}
    for word in probed(words):
        (counts[word],) = db.execute(
            "SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
            " LIMIT ?)",
            (f'"{word}"', CANDIDATES + 1),
        ).fetchone()
    return rarest(counts)


def probed(words: list[str]) -> list[str]:
    """The words whose frequency is looked up: the PROBED longest."""
    return sorted(words, key=len, reverse=True)[:PROBED]


def rarest(counts: dict[str, int]) -> list[str]:
    """Of words and their match counts (each capped just above CANDIDATES), the rarest
    whose matches together stay under CANDIDATES, at most MAX_TERMS of them."""
    chosen: list[str] = []
    total = 0
    for word in sorted((w for w in counts if counts[w]), key=counts.__getitem__):
        if total + counts[word] > CANDIDATES or len(chosen) == MAX_TERMS:
            break
        chosen.append(word)
        total += counts[word]
    return chosen


def scope_where(
    db: sqlite3.Connection, *, exclude: str | None, scope_of: str | None, agent: str | None
) -> tuple[str, list[object]] | None:
    """The conditions on sessions `s` that recall keeps to, or None when no session passes
    them (a first conversation: nothing to rank, and recall runs on every turn)."""
    where = ""
    args: list[object] = []
    if agent is not None:
        where += " AND s.agent = ?"
        args.append(agent)
    if exclude is not None:
        where += " AND s.id != ?"
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
    if where and db.execute(f"SELECT 1 FROM sessions s WHERE 1 {where}", args).fetchone() is None:
        return None
    return where, args


def search_op(
    query: str,
    limit: int,
    *,
    recall: bool = True,
    exclude: str | None = None,
    scope_of: str | None = None,
    agent: str | None = None,
) -> Callable[[sqlite3.Connection], list[Recalled]]:
    """The store operation behind recall and `session search`; scope_of: a session whose
    owner's (or chat's) sessions are the only ones searched; agent: only that agent's."""

    def op(db: sqlite3.Connection) -> list[Recalled]:
        scoped = scope_where(db, exclude=exclude, scope_of=scope_of, agent=agent)
        if scoped is None:
            return []
        where, args = scoped
        if recall:
            match = any_of(telling_words(db, words_of(query, recall=True)))
        else:
            match = fts_query(query, recall=False)
        if match is None:
            return []
        rows = db.execute(
            "SELECT m.id, m.session_id, m.role, m.created_at FROM"
            " (SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?"
            "  ORDER BY rank LIMIT ?) f"
            " JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.id = m.session_id"
            f" WHERE 1 {where} ORDER BY f.rank LIMIT ?",
            (match, RANKED if recall else limit * 10, *args, limit),
        ).fetchall()
        found = []
        for row_id, session_id, role, created_at in rows:  # snippets for the chosen few only
            (snip,) = db.execute(
                "SELECT snippet(messages_fts, 0, '', '', ' … ', 24) FROM messages_fts"
                " WHERE messages_fts MATCH ? AND rowid = ?",
                (match, row_id),
            ).fetchone()
            found.append(
                Recalled(
                    session_id=session_id,
                    role=role,
                    snippet=" ".join(snip.split()),
                    created_at=created_at,
                    message_id=row_id,
                )
            )
        return found

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
        self,
        store: SessionStore,
        top_k: int = 5,
        scope: Scope = "sender",
        cache: int = 256,
        *,
        agent: str = DEFAULT_AGENT,
        meaning: VectorRecall | None = None,
    ) -> None:
        self.store = store
        self.agent = agent
        """Whose sessions are searched: one agent never recalls another's conversations."""
        self.top_k = top_k
        self.scope = scope
        self.meaning = meaning
        """With embeddings: recall by meaning too, fused with the keywords' ranking."""
        self._cache: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._cache_size = cache

    async def recall(self, session: Session, text: str) -> list[Recalled]:
        scope_of = session.id if self.scope == "sender" else None
        if self.meaning is None:
            return await self.store.recall(
                text, self.top_k, exclude=session.id, scope_of=scope_of, agent=self.agent
            )
        from rousseau.state.hybrid import fuse

        wider = max(4 * self.top_k, 20)  # each ranking's best, for the fusion to choose from
        found: dict[str, list[Recalled]] = {}
        meaning = self.meaning

        async def keywords() -> None:
            found["keywords"] = await self.store.recall(
                text, wider, exclude=session.id, scope_of=scope_of, agent=self.agent
            )

        async def vectors() -> None:
            found["meaning"] = await meaning.nearest(
                text, wider, exclude=session.id, scope_of=scope_of, agent=self.agent
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(keywords)
            tg.start_soon(vectors)
        return fuse([found["keywords"], found["meaning"]], self.top_k)

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
