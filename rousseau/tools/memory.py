"""The `memory` tool: what an agent keeps about the person it talks to, their profile.

A profile is short dated entries in the store, one per agent and person; the agent adds,
replaces and removes them, bounded by `agent.memory.max_chars` in all, and is shown them at
the start of every turn that answers that person (ProfileSection). Whose profile a turn uses
is `messages.person_of_turn`: the sender of a private chat's message, the person at the
terminal, and nobody in a group (everyone there would read it) or a cron job. The person
lists it with /memory and deletes entries with /forget N; the owner sees every profile on
the dashboard and with `rousseau memory show`.

Before a session is compacted, MemoryFlush asks the model once, with this tool alone, to
save what should outlive the summary.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

import structlog

from rousseau.agent import Approver, Message, Provider, Request, Session, ToolCall, ToolOutput
from rousseau.agent.compress import render_transcript
from rousseau.agent.loop import run_tool
from rousseau.agent.protocols import AuditLog
from rousseau.messages import current_inbound, person_of_turn
from rousseau.state.protocol import ProfileStore
from rousseau.state.records import ProfileEntry, ProfileWrite
from rousseau.tools.base import Registry, Tool

log = structlog.get_logger("rousseau.memory")

MAX_ENTRY = 500
"""Characters one entry may have: an entry is one fact, not a document."""
HEADER = (
    "What you keep about the person you are talking to (their profile: change it with the"
    " memory tool; they see it with /memory):"
)
FLUSH_PROMPT = (
    "The conversation below is about to be folded into a short summary, and details it holds"
    " may be lost. Before that, use the memory tool to save to the profile of the person you"
    " are talking to what you should still know in later conversations: who they are, their"
    " preferences, standing instructions, ongoing projects and promises made. Add new entries"
    " and replace those that changed; keep each entry short, and do not repeat what the"
    " profile already holds. If nothing is worth keeping, answer without calling the tool."
)


def dated(entry: ProfileEntry) -> str:
    """An entry as the agent and the person see it: its date, then its text."""
    return f"[{datetime.fromtimestamp(entry.updated_at):%Y-%m-%d}] {entry.text}"


def used(entries: list[ProfileEntry]) -> int:
    """The characters a profile holds (what max_chars bounds)."""
    return sum(len(e.text) for e in entries)


def nobody_reason() -> str:
    """Why the running turn has no profile to change (person_of_turn is None)."""
    inbound = current_inbound.get()
    if inbound is not None and inbound.is_group:
        return (
            "this is a group chat: a person's profile is kept and shown only in their private"
            " chat with you, where no one else reads it"
        )
    return "this turn answers no one (a scheduled job): there is no person whose profile to change"


class MemoryTool(Tool):
    """Adds, replaces and removes entries of the profile of the person the turn answers."""

    name: ClassVar[str] = "memory"
    description: ClassVar[str] = (
        "Your memory of the person you are talking to: their profile, short dated entries you"
        " are shown at the start of every conversation with them. Keep what will still matter"
        " later: who they are, their preferences, standing instructions, ongoing projects;"
        " not passing details of this chat, and never passwords or other secrets."
        " action=add with text: a new entry. action=replace with old and text: rewrite an"
        " entry (old is its text, or a part of it no other entry has). action=remove with old:"
        f" delete an entry. An entry is one fact of at most {MAX_ENTRY} characters; the whole"
        " profile is bounded, and when it is full, merge entries (replace) or drop what is no"
        " longer true (remove) before adding. The person lists it with /memory and deletes"
        " entries with /forget."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"enum": ["add", "replace", "remove"]},
            "text": {"type": "string", "description": "the entry's text (add, replace)"},
            "old": {
                "type": "string",
                "description": "the entry replaced or removed: its text, or a unique part of it",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, profiles: ProfileStore, *, agent: str, max_chars: int) -> None:
        self.profiles = profiles
        self.agent = agent
        """Whose profiles these are: an agent never reads or writes another's."""
        self.max_chars = max_chars
        self.section = ProfileSection(profiles, agent=agent)
        """The profile as the agent is shown it, in its system prompt."""

    async def entries(self, person: str) -> list[ProfileEntry]:
        return await self.profiles.entries(agent=self.agent, person=person)

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        person = person_of_turn()
        if person is None:
            return ToolOutput(content=f"memory: {nobody_reason()}", is_error=True)
        action = input["action"]
        text = " ".join(str(input.get("text", "")).split())
        if action != "remove":
            if not text:
                return _error(f"{action} needs text: the entry, one short fact")
            if len(text) > MAX_ENTRY:
                return _error(
                    f"an entry is at most {MAX_ENTRY} characters (this one has {len(text)}):"
                    " keep one fact per entry, said briefly"
                )
        entries = await self.entries(person)
        if action == "add":
            if any(e.text == text for e in entries):
                return ToolOutput(content=f"already kept: {text}")
            written = await self.profiles.add_entry(
                self.agent, person, text, max_chars=self.max_chars
            )
            return await self._after(person, written, f"added: {text}")
        found = _find(entries, " ".join(str(input.get("old", "")).split()))
        if isinstance(found, str):
            return _error(found)
        if action == "remove":
            gone = await self.profiles.remove_entry(found.id, agent=self.agent, person=person)
            return await self._after(person, "done" if gone else "gone", f"removed: {found.text}")
        written = await self.profiles.replace_entry(
            self.agent, person, found.id, text, max_chars=self.max_chars
        )
        return await self._after(person, written, f"replaced: {found.text} -> {text}")

    async def _after(self, person: str, written: ProfileWrite, done: str) -> ToolOutput:
        self.section.changed(person)
        entries = await self.entries(person)
        size = f"{used(entries):,} of {self.max_chars:,} characters"
        if written == "full":
            return _error(
                f"the profile is full ({size} used): consolidate first. Merge entries that"
                " belong together into one shorter entry (replace), or remove what is no"
                " longer true or useful, then try again."
            )
        if written == "gone":
            return _error("that entry is gone (changed or removed meanwhile): look again")
        count = len(entries)
        log.info("memory.changed", agent=self.agent, entries=count)
        return ToolOutput(
            content=f"{done}\nThe profile holds {count} entr{'y' if count == 1 else 'ies'}, {size}."
        )


def _error(text: str) -> ToolOutput:
    return ToolOutput(content=f"memory: {text}", is_error=True)


def _find(entries: list[ProfileEntry], old: str) -> ProfileEntry | str:
    """The entry `old` names: the one of that text, else the only one containing it (in
    that case, else in any case); or why there is none."""
    if not old:
        return "say which entry: old is its text, or a part of it no other entry has"
    for entry in entries:
        if entry.text == old:
            return entry
    found = [e for e in entries if old in e.text] or [
        e for e in entries if old.casefold() in e.text.casefold()
    ]
    if len(found) == 1:
        return found[0]
    if found:
        return f"{len(found)} entries contain {old!r}: quote more of the one you mean"
    kept = "\n".join(f"- {e.text}" for e in entries) or "(none)"
    return f"no entry contains {old!r}. The entries are:\n{kept}"


class ProfileSection:
    """A ProfileProvider: the profile of the person the turn answers, for the system prompt
    (nothing for nobody, or for an empty profile).

    The loop asks at every model call of a turn: the profile is read once per turn (per
    user message) and again only after this agent's memory tool wrote to it. What changes
    it from elsewhere (/forget, the dashboard, another daemon) comes between turns."""

    def __init__(self, profiles: ProfileStore, *, agent: str, cache: int = 256) -> None:
        self.profiles = profiles
        self.agent = agent
        self._cache: OrderedDict[tuple[str, str], tuple[Message, str]] = OrderedDict()
        """Per person and session: the user message whose turn read the profile (held, so
        no later message can be taken for it), and what was shown."""
        self._cache_size = cache

    async def appendix(self, session: Session) -> str:
        person = person_of_turn()
        if person is None:
            return ""
        asked = next((m for m in reversed(session.messages) if m.starts_turn), None)
        key = (person, session.id)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is asked:
            self._cache.move_to_end(key)
            return cached[1]
        shown = await self.of(person)
        if asked is not None:
            self._cache[key] = (asked, shown)
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return shown

    def changed(self, person: str) -> None:
        """The person's profile was written to: read it again at the next call."""
        for key in [k for k in self._cache if k[0] == person]:
            del self._cache[key]

    async def of(self, person: str) -> str:
        entries = await self.profiles.entries(agent=self.agent, person=person)
        if not entries:
            return ""
        return "\n".join([HEADER, *(f"- {dated(e)}" for e in entries)])


class MemoryFlush:
    """A Flush: before a compaction, the model is asked once, with the memory tool alone, to
    save to the person's profile what should outlive the summary; the calls it makes run
    through the agent's approver (as unattended: nobody is asked) and its audit trail."""

    def __init__(
        self,
        provider: Provider,
        tool: MemoryTool,
        approver: Approver,
        *,
        audit: AuditLog | None = None,
        counted: Callable[[str], None] | None = None,
    ) -> None:
        self.provider = provider
        self.tool = tool
        self.approver = approver
        self.audit = audit
        self.counted = counted
        """Told each flush's outcome: saved, nothing, failed or skipped (the metric)."""

    async def flush(self, session: Session, messages: list[Message]) -> None:
        person = person_of_turn()
        if person is None:
            log.info("memory.flush_skipped", session=session.id, reason=nobody_reason())
            self._count("skipped")
            return
        profile = await self.tool.section.of(person) or "The profile is empty."
        request = Request(
            session_id=session.id,
            system=f"{FLUSH_PROMPT}\n\n{profile}",
            messages=[Message.user(render_transcript(messages))],
            tools=[self.tool.definition()],
        )
        try:
            response = await self.provider.complete(request)
        except Exception as exc:
            log.warning("memory.flush_failed", session=session.id, error=str(exc))
            self._count("failed")
            return
        only = Registry([self.tool])
        uses = response.message.tool_uses
        saved = 0
        for use in uses:
            result, _ = await run_tool(
                only, self.approver, session.id, use, unattended=True, audit=self.audit
            )
            saved += not result.is_error
        log.info(
            "memory.flushed",
            session=session.id,
            messages=len(messages),
            calls=len(uses),
            saved=saved,
        )
        self._count("saved" if saved else "nothing")

    def _count(self, outcome: str) -> None:
        if self.counted is not None:
            self.counted(outcome)
