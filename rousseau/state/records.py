"""The store's own records, and what both backends share to write and read them.

The store protocol (state/protocol.py) speaks in these; SQLite (daemon_state.py,
sqlite_cron.py, sqlite_profiles.py) and PostgreSQL (postgres_daemon.py, postgres_cron.py,
postgres_profiles.py) map their rows to them with the same column lists, so a part read from
either backend is the same part. This module imports only the agent core and the message
records, never a backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rousseau.agent import Attachment, Content, Message
from rousseau.messages import DEFAULT_AGENT, Outbound

MAX_PENDING_CODES = 20
"""Pending pairing codes per transport; a newcomer past it evicts the oldest (see pairing_code)."""
REJECTED_FOR = 86_400.0
"""How long a sender whose code the owner rejected gets no new one."""
REJECTED_KEY = "pairing.rejected:"  # transport_state key prefix, + sender id; value: until when
SWEEP_BATCH = 10_000
"""Messages one sweep deletes at most, so a first sweep over years of history never holds
the writer long; the next sweep goes on."""


class Retention(Protocol):
    """How long (seconds) finished rows are kept before the sweep deletes them."""

    inbox: float
    outbox: float
    audit: float
    cron_runs: float
    compacted: float | None
    """None: messages a summary replaced are kept for good."""


# -- sessions copied in ---------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class ImportedSession:
    """A session copied whole from another database (rousseau-agent's), its times kept."""

    id: str
    title: str
    created_at: float
    updated_at: float
    owner: str | None
    """Whose session it is, as the router records it (None: the local user's)."""
    chat: str | None
    messages: list[tuple[Message, float]]
    """Oldest first, each with when it was said."""
    chat_key: str | None = None
    """The chat whose next message continues it (`transport:chat`), unless that chat is
    bound to a session already."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionCopied:
    """What `import_session` did."""

    copied: bool
    """False: a session of that id was there already, and was left as it was."""
    bound: bool = False
    """Its chat now continues it."""


# -- inbox and outbox -----------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class OutboxRow:
    """A part of a reply waiting in the outbox."""

    id: int
    """The row's id: what `sent` and `retry_later` name."""
    message: Outbound
    """The part itself."""
    attempts: int
    """Tries made so far."""


@dataclass(kw_only=True, slots=True)
class Progress:
    """Where an inbound's turn got to (see DaemonStore.progress)."""

    appended: bool = False
    """Its user message is in the session."""
    done: str | None = None
    """The answer of a turn that finished but was never queued."""
    files: list[tuple[Attachment, str]] = field(default_factory=list)
    """The files that finished turn sent."""
    preview: list[str] = field(default_factory=list)
    """The messages its reply was being shown in as it was written."""


def files_json(attachments: tuple[Attachment, ...]) -> str | None:
    """Files as their column keeps them (None for none)."""
    if not attachments:
        return None
    return json.dumps([Content.of_attachment(a).to_dict() for a in attachments])


def files_of(stored: str | None) -> tuple[Attachment, ...]:
    """The files of a column written by files_json."""
    found = (Content.from_dict(d).attachment for d in json.loads(stored or "[]"))
    return tuple(a for a in found if a is not None)


def sent_files(stored: str | None) -> list[tuple[Attachment, str]]:
    """The files a turn sent, with their captions, from their inbox column."""
    found = []
    for entry in json.loads(stored or "[]"):
        attachment = Content.from_dict(entry["file"]).attachment
        if attachment is not None:
            found.append((attachment, str(entry.get("caption") or "")))
    return found


OUTBOX_COLUMNS = (
    "id, transport, chat_id, thread_id, reply_to, text, attempts, buttons, attachment, replaces"
)


def outbox_params(part: Outbound, now: float) -> tuple[object, ...]:
    """A part's values for a new outbox row: transport, chat_id, thread_id, reply_to, text,
    next_attempt_at, created_at, buttons, attachment, replaces. It is due at once (0, not
    `now`): a clock set back would otherwise hold it, and its chat's later parts, until the
    clock caught up."""
    return (
        part.transport,
        part.chat_id,
        part.thread_id,
        part.reply_to,
        part.text,
        0.0,
        now,
        json.dumps(list(part.buttons)) if part.buttons else None,
        files_json((part.attachment,) if part.attachment else ()),
        part.replaces,
    )


def outbox_row(r: tuple[Any, ...]) -> OutboxRow:
    """A part of the outbox from its OUTBOX_COLUMNS."""
    return OutboxRow(
        id=r[0],
        message=Outbound(
            transport=r[1],
            chat_id=r[2],
            thread_id=r[3],
            reply_to=r[4],
            text=r[5],
            buttons=tuple(json.loads(r[7])) if r[7] else (),
            attachment=next(iter(files_of(r[8])), None),
            replaces=r[9],
        ),
        attempts=r[6],
    )


# -- pairing --------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class PairingCode:
    """A one-time code a stranger was given, waiting for the owner's answer."""

    code: str
    transport: str
    sender_id: str
    chat_id: str
    """Where the stranger asked (where they are told the owner's answer)."""
    expires_at: float
    created_at: float = 0.0


@dataclass(kw_only=True, slots=True)
class PairingGrant:
    """The code a stranger is told, and what giving it cost."""

    code: str
    new: bool
    """False when the sender already had this live code (they were told it before)."""
    evicted: PairingCode | None = None
    """The transport's oldest pending code, dropped to make room for this one."""


CODE_COLUMNS = "code, transport, sender_id, chat_id, expires_at, created_at"


def pairing_code_of(row: tuple[str, str, str, str, float, float]) -> PairingCode:
    """A pairing code from its CODE_COLUMNS."""
    return PairingCode(
        code=row[0],
        transport=row[1],
        sender_id=row[2],
        chat_id=row[3],
        expires_at=row[4],
        created_at=row[5],
    )


# -- cron jobs and runs ---------------------------------------------------------------------

Misfire = Literal["run_once", "skip"]
RunStatus = Literal["running", "ok", "failed", "missed", "skipped"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CronJob:
    """A scheduled prompt as the store keeps it (cron/ reads its schedule and target)."""

    id: int
    name: str
    schedule: str
    """As written: 5-field cron, @daily and the like, or @every, maybe after CRON_TZ=."""
    timezone: str
    """The zone for a schedule without CRON_TZ (the config's cron.timezone when added)."""
    prompt: str
    deliver_to: str
    """`transport:recipient`, where the reply goes."""
    enabled: bool
    misfire: Misfire
    """What a start after missed times does: run the latest once, or skip them all."""
    created_at: float
    updated_at: float
    """Changed by an edit (enable, disable): a scheduler's `advance` from before it is void."""
    last_run_at: float | None
    last_status: str | None
    next_run_at: float | None
    """None: the schedule has no time left."""
    agent: str = DEFAULT_AGENT
    """The agent its turns run on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CronRun:
    """One scheduled time of a job: claimed, then finished (or recorded as missed)."""

    id: int
    job_id: int
    scheduled_at: float
    """The time it was due: with the job, what makes a run unique."""
    started_at: float | None
    finished_at: float | None
    status: RunStatus
    error: str | None
    session_id: str | None
    """The session its turn ran in."""


JOB_COLUMNS = (
    "id, name, schedule, timezone, prompt, deliver_to, enabled, misfire, created_at,"
    " updated_at, last_run_at, last_status, next_run_at, agent"
)
RUN_COLUMNS = "id, job_id, scheduled_at, started_at, finished_at, status, error, session_id"


def job_of(row: tuple[Any, ...]) -> CronJob:
    """A job from its JOB_COLUMNS."""
    return CronJob(
        id=row[0],
        name=row[1],
        schedule=row[2],
        timezone=row[3],
        prompt=row[4],
        deliver_to=row[5],
        enabled=bool(row[6]),
        misfire=row[7],
        created_at=row[8],
        updated_at=row[9],
        last_run_at=row[10],
        last_status=row[11],
        next_run_at=row[12],
        agent=row[13],
    )


def run_of(row: tuple[Any, ...]) -> CronRun:
    """A run from its RUN_COLUMNS."""
    return CronRun(
        id=row[0],
        job_id=row[1],
        scheduled_at=row[2],
        started_at=row[3],
        finished_at=row[4],
        status=row[5],
        error=row[6],
        session_id=row[7],
    )


# -- people's profiles ----------------------------------------------------------------------

ProfileWrite = Literal["done", "full", "gone"]
"""What adding or replacing an entry did: done; refused, the profile would pass its bound
(full); or the entry was no longer there (gone)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileEntry:
    """One short, dated entry of what an agent keeps about a person."""

    id: int
    agent: str
    """The agent whose profile of the person it is: no other agent sees it."""
    person: str
    """Whom it is about: `transport:sender_id`, or LOCAL_USER (the terminal's person)."""
    text: str
    created_at: float
    updated_at: float
    """When its text was last written (its creation, or a replace)."""


PROFILE_COLUMNS = "id, agent, person, text, created_at, updated_at"


def profile_entry_of(row: tuple[Any, ...]) -> ProfileEntry:
    """An entry from its PROFILE_COLUMNS."""
    return ProfileEntry(
        id=row[0],
        agent=row[1],
        person=row[2],
        text=row[3],
        created_at=row[4],
        updated_at=row[5],
    )


def over_bound(used: int, was: int, now: int, max_chars: int) -> bool:
    """Whether writing `now` characters in place of `was` (0 for a new entry) to a profile
    holding `used` passes `max_chars`. A write that does not grow the profile is never over:
    a profile over a bound lowered since can still be consolidated."""
    after = used - was + now
    return after > max_chars and after > used


# -- spending ---------------------------------------------------------------------------------

ALL_PEOPLE = "*"
"""The person of an agent's own daily total among the spending rows."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Charge:
    """One model call and what it cost, as the ledger keeps it."""

    at: float
    day: str
    """`YYYY-MM-DD` in the configured time zone: the day its budget counts it in."""
    agent: str
    person: str
    """Who it was for (`transport:sender`); empty for work nobody asked for (cron,
    heartbeats) and for the terminal."""
    session_id: str
    """The session it is charged to (a sub-agent's calls: its parent's)."""
    job: str
    """What called the model: turn, cron, heartbeat, compaction, vision, delegation."""
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    usd: float = 0.0

    @property
    def tokens(self) -> int:
        cached = self.cache_read_tokens + self.cache_write_tokens
        return self.input_tokens + self.output_tokens + cached


@dataclass(frozen=True, kw_only=True, slots=True)
class Spent:
    """What was spent in a period: dollars and tokens, and in how many calls."""

    usd: float = 0.0
    tokens: int = 0
    calls: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Spending:
    """What a budget check needs: an agent's day and month, and one person's day."""

    day: Spent = field(default_factory=Spent)
    month: Spent = field(default_factory=Spent)
    person_day: Spent = field(default_factory=Spent)


@dataclass(frozen=True, kw_only=True, slots=True)
class SpendingRow:
    """A line of a usage report: one agent's (and person's, or ALL_PEOPLE) spending."""

    agent: str
    person: str
    spent: Spent


def month_of(day: str) -> tuple[str, str]:
    """The first and last possible day of `day`'s month, as days are written."""
    return day[:7] + "-01", day[:7] + "-31"


SPENDING_UPSERT = (
    "INSERT INTO spending_days (agent, person, day, calls, tokens, usd) VALUES ({p}, {p}, {p}, 1,"
    " {p}, {p}) ON CONFLICT (agent, person, day) DO UPDATE SET calls = spending_days.calls + 1,"
    " tokens = spending_days.tokens + excluded.tokens, usd = spending_days.usd + excluded.usd"
)
"""Adds one call to an agent's (or a person's) day; {p}: the backend's placeholder."""
CHARGE_INSERT = (
    "INSERT INTO model_calls (at, day, agent, person, session_id, job, model, input_tokens,"
    " output_tokens, cache_read_tokens, cache_write_tokens, usd)"
    " VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
)
SPENT_SELECT = (
    "SELECT coalesce(sum(usd), 0), coalesce(sum(tokens), 0), coalesce(sum(calls), 0)"
    " FROM spending_days WHERE agent = {p} AND person = {p} AND day >= {p} AND day <= {p}"
)
REPORT_SELECT = (
    "SELECT agent, person, sum(usd), sum(tokens), sum(calls) FROM spending_days"
    " WHERE day >= {p} AND day <= {p}{where} GROUP BY agent, person ORDER BY sum(usd) DESC,"
    " agent, person"
)


def charge_args(charge: Charge) -> tuple[Any, ...]:
    return (
        charge.at,
        charge.day,
        charge.agent,
        charge.person,
        charge.session_id,
        charge.job,
        charge.model,
        charge.input_tokens,
        charge.output_tokens,
        charge.cache_read_tokens,
        charge.cache_write_tokens,
        charge.usd,
    )


def spent_of(row: Any) -> Spent:
    return Spent(usd=float(row[0] or 0), tokens=int(row[1] or 0), calls=int(row[2] or 0))


def report_where(agent: str | None, person: str | None, placeholder: str) -> tuple[str, list[str]]:
    """The report's filter: one agent's rows, and one person's or everyone's but the totals."""
    where, args = "", []
    if agent is not None:
        where += f" AND agent = {placeholder}"
        args.append(agent)
    if person is not None:
        where += f" AND person = {placeholder}"
        args.append(person)
    return where, args
