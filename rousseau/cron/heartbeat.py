"""Heartbeats (DESIGN.md section 9, `agent.heartbeat`): an agent looks, every `every` within
its active hours, whether something needs saying, and says it where `deliver_to` names.

Each heartbeat is a cron job of the store named `heartbeat:AGENT` (made from the config at
start): its run rows are the claims that let one daemon of a cluster run each time, and
`rousseau cron list` shows when it runs next. A run costs nothing when nothing changed:
when no session of the agent was written to since the last heartbeat, HEARTBEAT.md did not
change and none of its dated items came due, no model is called. An answer of exactly
NOTHING is not delivered; a spent budget skips the run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog

from rousseau.agent import Agent, BudgetExceededError
from rousseau.costs import Meter, Payer, paying
from rousseau.cron.jobs import CronError, CronJobs, target_of
from rousseau.cron.scheduler import HEARTBEAT, Notify, RunOutcome

if TYPE_CHECKING:
    from rousseau.config.sections import HeartbeatConfig
    from rousseau.state import SessionStore
    from rousseau.state.records import CronJob

log = structlog.get_logger("rousseau.cron")

PREFIX = HEARTBEAT
NOTHING = "NOTHING"
"""The answer that means there is nothing to say: it is not delivered."""
NOTES = "HEARTBEAT.md"
"""The file in the agent's workspace whose items each heartbeat reads."""
NOTES_LIMIT = 20_000
"""The most characters of HEARTBEAT.md a heartbeat reads."""
RECENT = 50
"""Sessions looked at for a change since the last heartbeat (the most recently written)."""

_DATED = re.compile(r"\b(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}):(\d{2}))?\b")
_DAILY = re.compile(r"(?<![\d:-])(\d{1,2}):(\d{2})(?![\d:])")
_DONE = re.compile(r"^\s*[-*]\s*\[[xX]\]")


def session_of(agent: str) -> str:
    """The heartbeat's own session (it keeps what it said before, so it does not repeat)."""
    return f"heartbeat-{agent}"


def active(hours: str, moment: datetime) -> bool:
    """Whether `moment` (in its zone) is inside `HH:MM-HH:MM` (which may span midnight)."""
    start, end = (_minutes(part) for part in hours.split("-"))
    now = moment.hour * 60 + moment.minute
    if start <= end:
        return start <= now < end
    return now >= start or now < end


def _minutes(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def due_items(notes: str, since: float, now: float, zone: tzinfo) -> list[str]:
    """The lines of HEARTBEAT.md whose time came after `since` and by `now`: a dated line
    (`2026-12-24`, `2026-12-24 18:00`) at that moment, a line with only a time (`09:30`)
    every day; a checked item (`- [x]`) never."""
    found = []
    today = datetime.fromtimestamp(now, zone).date()
    for line in notes.splitlines():
        if _DONE.match(line):
            continue
        moments: list[float] = []
        dated = _DATED.search(line)
        if dated is not None:
            hour, minute = int(dated.group(2) or 0), int(dated.group(3) or 0)
            try:
                on = datetime.strptime(dated.group(1), "%Y-%m-%d")
                moments.append(on.replace(hour=hour, minute=minute, tzinfo=zone).timestamp())
            except ValueError:
                continue
        elif (daily := _DAILY.search(line)) is not None:
            hour, minute = int(daily.group(1)), int(daily.group(2))
            if hour > 23 or minute > 59:
                continue
            for day in (today - timedelta(days=1), today):
                at = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
                moments.append(at.timestamp())
        if any(since < moment <= now for moment in moments):
            found.append(line.strip())
    return found


@dataclass(kw_only=True)
class Heartbeat:
    """One agent's heartbeat: when it runs, what it reads, and where its findings go."""

    name: str
    """The agent's name."""
    agent: Agent
    """The agent, on agent.models.heartbeat's model where one is named."""
    section: HeartbeatConfig
    workspace: str
    """The agent's workspace, where HEARTBEAT.md is (`~` allowed)."""
    store: SessionStore
    zone: tzinfo
    meter: Meter | None = None
    clock: Callable[[], float] = field(default=time.time)

    def job(self) -> tuple[str, str]:
        """The job's name and schedule."""
        return PREFIX + self.name, f"@every {int(self.section.every)}s"

    async def run(self, job: CronJob, notify: Notify) -> RunOutcome:
        session_id = session_of(self.name)
        now = self.clock()
        if not active(self.section.active_hours, datetime.fromtimestamp(now, self.zone)):
            return RunOutcome("skipped", session_id, error="outside active_hours")
        info = await self.store.info(session_id)
        last = info.updated_at if info is not None else 0.0
        notes, changed_at = await anyio.to_thread.run_sync(self._notes)
        due = due_items(notes, last, now, self.zone)
        if not due and changed_at <= last and not await self._changed(last, session_id):
            log.info("cron.heartbeat_idle", agent=self.name)
            return RunOutcome("skipped", session_id, error="nothing changed")
        payer = Payer(agent=self.name, session_id=session_id, job="heartbeat")
        paying.set(payer)
        try:
            if self.meter is not None:  # a spent budget: not even the session is touched
                await self.meter.check(payer)
            session = await self.store.load_or_create(session_id)
            target = self.section.deliver_to
            await self.store.set_scope(session_id, owner=target, chat=target, agent=self.name)
            response = await self.agent.reply(
                session, self._prompt(notes, due, now), unattended=True
            )
        except BudgetExceededError as exc:
            log.info("cron.heartbeat_over_budget", agent=self.name, error=str(exc))
            return RunOutcome("skipped", session_id, error=str(exc))
        text = response.message.text.strip()
        if not text or text.strip(" .`*\"'") == NOTHING:
            log.info("cron.heartbeat_nothing", agent=self.name)
            return RunOutcome("ok", session_id, text=NOTHING)
        transport, recipient = target_of(job)
        await notify(transport, recipient, text)
        log.info("cron.heartbeat_said", agent=self.name, target=target)
        return RunOutcome("ok", session_id, text=text)

    def _notes(self) -> tuple[str, float]:
        """HEARTBEAT.md's text and when it changed (empty and 0 without one)."""
        path = Path(self.workspace).expanduser() / NOTES
        try:
            with path.open(encoding="utf-8", errors="replace") as notes:
                return notes.read(NOTES_LIMIT), path.stat().st_mtime
        except OSError:
            return "", 0.0

    async def _changed(self, since: float, own: str) -> bool:
        """Whether a session of the agent (but the heartbeat's own) was written since."""
        for info in await self.store.list_sessions(RECENT):
            if info.updated_at <= since:
                return False  # the latest first: none after this one is newer
            if info.agent == self.name and info.id != own:
                return True
        return False

    def _prompt(self, notes: str, due: list[str], now: float) -> str:
        when = datetime.fromtimestamp(now, self.zone).strftime("%A %Y-%m-%d %H:%M %Z")
        parts = [self.section.prompt.strip(), f"Now: {when}."]
        if notes.strip():
            parts.append(f"{NOTES}:\n{notes.strip()}")
        if due:
            parts.append("Due since the last check-in:\n" + "\n".join(due))
        return "\n\n".join(parts)


async def sync_jobs(jobs: CronJobs, heartbeats: dict[str, Heartbeat], timezone: str) -> None:
    """Make the store's heartbeat jobs those of the config: each configured one there as
    configured, none of an agent that has none (any daemon may do it; a job another daemon
    made or removed meanwhile is left as it is)."""
    for job in await jobs.all():
        if not job.name.startswith(PREFIX):
            continue
        heartbeat = heartbeats.get(job.name.removeprefix(PREFIX))
        if heartbeat is None or _stored(heartbeat, timezone) != (
            job.schedule,
            job.prompt,
            job.deliver_to,
            job.timezone,
        ):
            await _quietly(jobs.remove(job.name), "no job named")
    for agent, heartbeat in heartbeats.items():
        name, schedule = heartbeat.job()
        if await jobs.store.find(name) is not None:
            continue
        section = heartbeat.section
        made = jobs.add(
            name,
            schedule,
            section.prompt,
            section.deliver_to,
            timezone=timezone,
            misfire="skip",
            agent=agent,
            heartbeat=True,
        )
        await _quietly(made, "exists already")
        log.info("cron.heartbeat_scheduled", agent=agent, every=section.every)


def _stored(heartbeat: Heartbeat, timezone: str) -> tuple[str, str, str, str]:
    """What the heartbeat's job holds, when it is as configured."""
    section = heartbeat.section
    return heartbeat.job()[1], section.prompt, section.deliver_to, timezone


async def _quietly(change: Awaitable[object], raced: str) -> None:
    """A change another daemon may have made first: that CronError (saying `raced`) is not
    ours; any other is."""
    try:
        await change
    except CronError as exc:
        if raced not in str(exc):
            raise
        log.info("cron.heartbeat_job_raced", error=str(exc))
