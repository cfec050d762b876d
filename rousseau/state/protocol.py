"""What the rest of rousseau needs of a session store, whichever database keeps it.

Two backends implement it: `Store` (SQLite, state/store.py, the default) and `PostgresStore`
(state/postgres.py, for several daemons sharing one database). tests/state/test_protocol.py
runs one suite against both. The records these protocols speak in are the store's own
(state/records.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rousseau.agent import Attachment, Role, Session, Usage
from rousseau.agent.protocols import AuditLog, MessageLog, ToolCallRecord
from rousseau.messages import DEFAULT_AGENT
from rousseau.state.records import (
    Charge,
    CronJob,
    CronRun,
    ImportedSession,
    Misfire,
    OutboxRow,
    PairingCode,
    PairingGrant,
    ProfileEntry,
    ProfileWrite,
    Progress,
    Retention,
    RunStatus,
    SessionCopied,
    Spending,
    SpendingRow,
)

if TYPE_CHECKING:
    from rousseau.messages import Inbound, Outbound


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
    parent: str | None = None
    """A sub-agent's session: the session that delegated it."""


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
    message_id: int = 0
    """The message's own id (what recall's two rankings are fused by)."""


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
        self,
        session_id: str,
        *,
        owner: str | None,
        chat: str | None,
        agent: str = DEFAULT_AGENT,
        parent: str | None = None,
    ) -> None:
        """Whose session this is (None, None: the local user's), which agent's, and (a
        sub-agent's) which session delegated it."""
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

    async def children(self, session_id: str) -> list[SessionInfo]:
        """The sessions of the sub-agents `session_id` delegated to, the latest first."""
        ...

    async def info(self, session_id: str) -> SessionInfo | None:
        """The session as listed, without its messages."""
        ...

    async def resolve(self, prefix: str) -> str:
        """The id of the one session whose id is `prefix` or starts with it; StoreError
        when none does or several do."""
        ...

    async def totals(self) -> tuple[int, Usage]:
        """How many sessions there are and what they cost, all together."""
        ...

    async def import_session(self, imported: ImportedSession) -> SessionCopied:
        """Copy a session with its messages (and its chat's binding) in one transaction;
        one whose id is here already is left alone."""
        ...

    async def aclose(self) -> None: ...


class DaemonStore(Protocol):
    """The daemon's inbox, outbox, chat map and pairing (DaemonState on SQLite,
    PostgresDaemonState on PostgreSQL)."""

    async def accept(self, inbound: Inbound, *, ignored: bool = False) -> bool:
        """Record an inbound (durably, before returning); False if it was seen before."""
        ...

    async def mark_appended(self, inbound: Inbound, session_id: str) -> None: ...

    async def progress(self, inbound: Inbound, session_id: str) -> Progress: ...

    async def shown_preview(self, inbound: Inbound, ids: list[str]) -> None: ...

    async def sent_file(self, inbound: Inbound, attachment: Attachment, caption: str) -> None: ...

    async def forget_sent_files(self, inbound: Inbound) -> None: ...

    async def pending(self) -> list[Inbound]:
        """Inbound messages accepted but not answered, oldest first (this daemon's to run)."""
        ...

    async def finish(
        self,
        inbound: Inbound | None,
        parts: list[Outbound],
        *,
        error: str | None = None,
        history: str | None = None,
    ) -> None:
        """In one transaction: queue the reply parts and mark the inbound done (or failed).
        `history`, a session id: that session's queued history writes are made first, and if
        one failed, nothing is finished and its error is raised (the turn then counts as
        not finished, as its own flush would have said)."""
        ...

    async def due(
        self, transport: str, limit: int = 50, *, skip: Collection[str] = ()
    ) -> list[OutboxRow]: ...

    async def waiting(
        self, transport: str, *, skip: Collection[str] = ()
    ) -> tuple[int, float | None]:
        """How many parts of the transport are still to send, and when the soonest of them
        that this daemon could take, outside the chats in `skip` (busy sending), may go
        (None with none)."""
        ...

    async def sent(self, row_id: int) -> None: ...

    async def retry_later(
        self, row_id: int, delay: float, error: str, *, give_up: bool
    ) -> None: ...

    async def outbox_pending(self, transports: Collection[str] | None = None) -> int: ...

    async def sweep(self, ages: Retention, now: float | None = None) -> dict[str, int]: ...

    async def media_in_use(self) -> set[str]: ...

    async def session_for(self, session_key: str) -> str | None: ...

    async def bind_session(
        self,
        session_key: str,
        session_id: str,
        *,
        owner: str | None = None,
        chat: str | None = None,
        agent: str = DEFAULT_AGENT,
    ) -> None: ...

    async def is_allowed(self, transport: str, sender_id: str) -> bool: ...

    async def pairing_code(
        self, transport: str, sender_id: str, chat_id: str, new_code: str, ttl: float
    ) -> PairingGrant | None: ...

    async def pairing_codes(self) -> list[PairingCode]: ...

    async def approve(self, code: str) -> PairingCode | None: ...

    async def reject(self, code: str, *, for_seconds: float = ...) -> PairingCode | None: ...


class JobStore(Protocol):
    """Cron jobs and their runs, kept as given (SqliteCronJobs, PostgresCronJobs): cron/
    checks a job's name, schedule and target, and works out its times, before it asks.

    A run row is the claim: one per job and scheduled time, so a time runs once, whichever
    daemon or restart gets there first."""

    async def add(
        self,
        *,
        name: str,
        schedule: str,
        timezone: str,
        prompt: str,
        deliver_to: str,
        enabled: bool,
        misfire: Misfire,
        agent: str,
        now: float,
        next_run_at: float | None,
    ) -> CronJob | None:
        """The new job; None when a job of that name exists."""
        ...

    async def all(self) -> list[CronJob]:
        """Every job, by name."""
        ...

    async def find(self, key: str) -> CronJob | None:
        """A job by its id (all digits) or its name."""
        ...

    async def remove(self, key: str) -> CronJob | None:
        """Delete a job (by id or name) and its runs; the job, or None if there is none."""
        ...

    async def set_enabled(
        self, job_id: int, enabled: bool, *, next_run_at: float | None, now: float
    ) -> CronJob | None:
        """Enable or disable a job, with its next run; the job as it is now, or None if it
        is gone."""
        ...

    async def advance(self, job: CronJob, next_run_at: float | None) -> None:
        """Move a job's next run on (unless someone changed the job meanwhile)."""
        ...

    async def claim(
        self, job: CronJob, scheduled_at: float, status: RunStatus = "running", error: str = ""
    ) -> int | None:
        """Record a run of `job` for `scheduled_at`; its id, or None if it was claimed before."""
        ...

    async def finish(
        self, run_id: int, job: CronJob, status: RunStatus, *, error: str = "", session_id: str = ""
    ) -> None:
        """Record how a run ended, on the run and as its job's last status."""
        ...

    async def runs(self, job_id: int | None = None, limit: int = 50) -> list[CronRun]:
        """The newest runs first, of one job or of all."""
        ...


class SpendingStore(Protocol):
    """What every model call cost, per agent, person, session and day (SqliteSpending,
    PostgresSpending): a call and its day's totals are written in one transaction, so two
    daemons sharing the database read one budget."""

    async def record(self, charge: Charge) -> None:
        """Keep one call's cost (it may be queued: a later read on this store sees it)."""
        ...

    async def spending(self, agent: str, person: str, day: str) -> Spending:
        """An agent's spending on `day` and in its month, and `person`'s on `day`."""
        ...

    async def report(
        self, first: str, last: str, *, agent: str | None = None, person: str | None = None
    ) -> list[SpendingRow]:
        """Spending from day `first` to `last` by agent and person (ALL_PEOPLE: the agent's
        total), the costliest first."""
        ...

    async def session_cost(self, session_id: str) -> float:
        """What the calls charged to a session cost, in USD."""
        ...


class ProfileStore(Protocol):
    """What each agent keeps about each person it talks to: short dated entries
    (SqliteProfiles, PostgresProfiles). A profile's bound is checked in the transaction
    that writes to it, so two turns of one person writing at once cannot pass it."""

    async def entries(
        self, *, agent: str | None = None, person: str | None = None
    ) -> list[ProfileEntry]:
        """The entries of one agent's profile of one person, oldest first; leaving out
        `agent` or `person`, of every such profile (by agent, then person)."""
        ...

    async def add_entry(
        self, agent: str, person: str, text: str, *, max_chars: int
    ) -> ProfileWrite:
        """A new entry: done, or full when the profile would then hold more than
        `max_chars` characters."""
        ...

    async def replace_entry(
        self, agent: str, person: str, entry_id: int, text: str, *, max_chars: int
    ) -> ProfileWrite:
        """An entry of that profile given new text (and time): done, full (see
        `records.over_bound`), or gone."""
        ...

    async def remove_entry(
        self, entry_id: int, *, agent: str | None = None, person: str | None = None
    ) -> ProfileEntry | None:
        """Delete an entry (only of that agent's profile of that person, where named);
        what was deleted, or None."""
        ...


class VectorStore(Protocol):
    """The messages' embeddings, beside them in the same database (SqliteVectors with
    sqlite-vec, PostgresVectors with pgvector), for recall by meaning. Vectors are of one
    model at a time: naming another starts them again. A message's text is embedded once."""

    async def unavailable(self) -> str | None:
        """Why vectors cannot be kept here (the extension is missing), or None."""
        ...

    async def unembedded(self, model: str, limit: int) -> list[tuple[int, str]]:
        """The oldest messages not yet embedded with `model`, (id, text), at most `limit`."""
        ...

    async def put(self, model: str, vectors: list[tuple[int, list[float]]]) -> None:
        """Keep the vectors of these messages (replacing any), made by `model`; the messages
        before the last of them count as done."""
        ...

    async def nearest(
        self,
        model: str,
        vector: list[float],
        limit: int,
        *,
        exclude: str | None = None,
        scope_of: str | None = None,
        agent: str | None = None,
    ) -> list[Recalled]:
        """The messages whose vectors are closest to `vector`, closest first, scoped as
        `SessionStore.recall` is; none when the vectors are another model's."""
        ...

    async def progress(self, model: str) -> tuple[int, int]:
        """How many messages with text are embedded with `model`, and how many there are."""
        ...

    async def prune(self) -> int:
        """Drop the vectors of messages deleted since (a deleted session's); how many."""
        ...


class SharedState(Protocol):
    """What a router needs where several daemons share the state: one session's turns on
    one daemon at a time, each chat's messages answered in the order they came, and the
    work of a daemon whose turn slots are full taken by one with a free slot."""

    def session_claimed(self, session_key: str) -> AbstractAsyncContextManager[None]:
        """Held around a turn of the session."""
        ...

    async def earlier(self, inbound: Inbound) -> list[Inbound]:
        """Holding its session: the chat's earlier messages still unanswered, whichever
        daemon took them in, to answer first."""
        ...

    async def unanswered(self, inbound: Inbound) -> bool:
        """Holding its session: whether it still waits for its answer (another daemon may
        have answered it first, as one of its chat's earlier messages)."""
        ...

    async def hand_over(self, inbound: Inbound) -> None:
        """Leave a message this daemon accepted for whichever daemon pulls it first."""
        ...

    async def pull(self, chats: int) -> list[Inbound]:
        """The waiting messages of up to `chats` chats no other daemon works on, claimed
        for this one, oldest first (a dead daemon's unanswered messages among them)."""
        ...

    async def listen(self, work: Callable[[], None], parts: Callable[[str], None]) -> None:
        """Until cancelled: `work()` whenever messages may wait to be pulled, and
        `parts(transport)` when another daemon queued a reply for this one to send."""
        ...
