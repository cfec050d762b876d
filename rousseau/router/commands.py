"""Chat commands: the router's, never the model's (DESIGN.md sections 1 and 8).

Each is one entry of COMMANDS. A `Command` is called by name, the message's first word, and
answered in the session's order in place of a turn; or, `at_once`, as it arrives (`/stop`
must not wait behind the turn it stops). An `Answer` is a reply to a question the daemon
asked (`yes ID` / `no ID`): it is looked for before admission, since the person answering
may be an owner the chat's policy would not otherwise let in. `/help` lists the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
import structlog

from rousseau.approvals import ChatApprovals
from rousseau.costs import Meter
from rousseau.messages import Inbound, KeyValue
from rousseau.policy import Admission, Admitted, Verdict
from rousseau.router.sessions import Sessions
from rousseau.state.protocol import DaemonStore, ProfileStore

log = structlog.get_logger("rousseau.router")

INTRO = "I'm an assistant. Just write to me."
"""The first line of /help; a line per listed command follows."""
STARTED = "Started a new conversation."
STOPPED = "Stopped."
NOTHING_TO_STOP = "Nothing is running."


@dataclass(kw_only=True, slots=True, frozen=True)
class Context:
    """What a command may use: the router's parts, handed over as they are."""

    commands: Commands
    """The table this command is in (what /help lists)."""
    state: DaemonStore
    kv: Callable[[str], KeyValue]
    """A transport's own durable state (per-chat choices such as spoken replies)."""
    sessions: Sessions
    running: Mapping[str, tuple[Inbound, anyio.CancelScope]]
    """The turn running in each session, and the message it answers."""
    admission: Admission
    approvals: ChatApprovals | None
    profiles: Mapping[str, ProfileStore]
    """Where each agent that keeps people's profiles keeps them (/memory, /forget)."""
    meter: Meter | None = None
    """What model calls cost and the budgets (/usage)."""
    speaks: bool = False
    """Whether answers can be spoken at all (`speech` is set: /voice)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Command:
    """A command called by name."""

    names: tuple[str, ...]
    """What the message starts with (`/new`), in any case; the first is its main name."""
    usage: str = ""
    """What it does, its line in /help; empty: not listed."""
    at_once: bool = False
    """Answered as it arrives, not behind the session's turns."""
    run: Callable[[Context, Inbound], Awaitable[str]]
    """Does what the command asks; the reply."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Answer:
    """A reply to a question the daemon asked, taken (as handled) before admission."""

    claims: Callable[[Context, Inbound], Awaitable[bool]]
    """Whether the message is such a reply, from someone who may give it; if not, it is an
    ordinary message."""
    run: Callable[[Context, Inbound], Awaitable[str]]
    """Acts on the reply; what its sender is told."""


async def _new(ctx: Context, inbound: Inbound) -> str:
    await ctx.sessions.new(inbound)
    return STARTED


async def _stop(ctx: Context, inbound: Inbound) -> str:
    """Cancel the session's running turn (the agent closes what it cut short, a running
    command is killed)."""
    running = ctx.running.get(inbound.session_key)
    # Else the sender's own turns in other threads of the chat: a new mail, or a new
    # thread, is where /stop may come from when the turn runs in another.
    scopes = (
        [running[1]]
        if running is not None
        else [
            scope
            for asked, scope in ctx.running.values()
            if (asked.transport, asked.chat_id, asked.sender_id)
            == (inbound.transport, inbound.chat_id, inbound.sender_id)
        ]
    )
    for scope in scopes:
        scope.cancel()
        log.info("router.turn_stopped", transport=inbound.transport, chat=inbound.chat_id)
    return STOPPED if scopes else NOTHING_TO_STOP


async def _help(ctx: Context, inbound: Inbound) -> str:
    return ctx.commands.help


NO_MEMORY = "I keep no profile of anyone here."
IN_PRIVATE = "What I keep about you is shown only in a private chat with me: ask me there."


def _profile(ctx: Context, inbound: Inbound) -> tuple[ProfileStore, str] | str:
    """The asking person's profile (its store and their key), or why it is not shown here."""
    profiles = ctx.profiles.get(inbound.agent)
    if profiles is None:
        return NO_MEMORY
    if inbound.is_group:  # everyone in the group would read it
        return IN_PRIVATE
    return profiles, f"{inbound.transport}:{inbound.sender_id}"


async def _memory(ctx: Context, inbound: Inbound) -> str:
    """The person's profile, as this chat's agent keeps it, numbered for /forget."""
    from rousseau.tools.memory import dated

    found = _profile(ctx, inbound)
    if isinstance(found, str):
        return found
    profiles, person = found
    entries = await profiles.entries(agent=inbound.agent, person=person)
    if not entries:
        return "I keep nothing about you yet."
    lines = [f"{n}. {dated(e)}" for n, e in enumerate(entries, 1)]
    return "\n".join(
        ["What I keep about you:", *lines, "", "/forget N deletes entry N (/forget all: all)."]
    )


async def _forget(ctx: Context, inbound: Inbound) -> str:
    """Delete entry N of the person's profile as /memory numbers it (or all of them)."""
    found = _profile(ctx, inbound)
    if isinstance(found, str):
        return found
    profiles, person = found
    which = inbound.text.split()[1:]
    entries = await profiles.entries(agent=inbound.agent, person=person)
    if which == ["all"]:
        for entry in entries:
            await profiles.remove_entry(entry.id, agent=inbound.agent, person=person)
        log.info("router.profile_forgotten", agent=inbound.agent, entries=len(entries))
        return f"Forgotten: all {len(entries)} entries." if entries else "There was nothing."
    if len(which) != 1 or not which[0].isdigit():
        return "Say which entry: /forget N, N as /memory numbers it (or /forget all)."
    n = int(which[0])
    if not 1 <= n <= len(entries):
        return f"There is no entry {n}: /memory lists them."
    gone = await profiles.remove_entry(entries[n - 1].id, agent=inbound.agent, person=person)
    log.info("router.profile_forgotten", agent=inbound.agent, entries=int(gone is not None))
    return f"Forgotten: {gone.text}" if gone is not None else "It was gone already."


async def _usage(ctx: Context, inbound: Inbound) -> str:
    """Today's and this month's tokens and cost of this chat's agent, and of the person
    asking (their own only in a private chat, as /memory)."""
    meter = ctx.meter
    if meter is None:
        return "Usage is not recorded here."
    from rousseau.costs.report import usage_lines

    person = f"{inbound.transport}:{inbound.sender_id}"
    return await usage_lines(meter, inbound.agent, None if inbound.is_group else person)


async def _voice(ctx: Context, inbound: Inbound) -> str:
    """Spoken replies in this chat: /voice on (every answer is also said), /voice off."""
    from rousseau.router.voice import CHOSEN

    which = inbound.text.split()[1:]
    if which not in (["on"], ["off"]):
        return "Say /voice on (answers are also spoken here) or /voice off."
    await ctx.kv(inbound.transport).set(CHOSEN + inbound.chat_id, which[0])
    if which == ["off"]:
        return "Voice replies are off in this chat."
    if not ctx.speaks:
        return "Voice replies are on here, but no speech is set up (speech: in the config)."
    return "Voice replies are on in this chat: my answers will also come as voice notes."


async def _approval_answer(ctx: Context, inbound: Inbound) -> bool:
    """An owner's `yes ID` / `no ID` (in groups too, mention or not); from a stranger it is
    an ordinary message."""
    approvals = ctx.approvals
    if approvals is None or not await approvals.knows(inbound.text):
        return False
    who = f"{inbound.transport}:{inbound.sender_id}"
    return who in approvals.owners or await ctx.admission.admits(inbound)


async def _settle(ctx: Context, inbound: Inbound) -> str:
    assert ctx.approvals is not None
    return await ctx.approvals.settle(inbound)


COMMANDS: tuple[Command | Answer, ...] = (
    Command(names=("/new", "/reset"), usage="start a fresh conversation", run=_new),
    Command(names=("/stop",), usage="stop the answer being written", at_once=True, run=_stop),
    Command(names=("/memory",), usage="what I keep about you, numbered", run=_memory),
    Command(names=("/forget",), usage="/forget N deletes entry N of /memory", run=_forget),
    Command(names=("/usage",), usage="today's and this month's tokens and cost", run=_usage),
    Command(names=("/voice",), usage="/voice on|off: answers also spoken here, or not", run=_voice),
    Command(names=("/help",), usage="this message", run=_help),
    Answer(claims=_approval_answer, run=_settle),
)


class Commands:
    """A table of commands, looked up by the messages that call them."""

    def __init__(self, table: Sequence[Command | Answer] = COMMANDS) -> None:
        self._named = {
            name: command
            for command in table
            if isinstance(command, Command)
            for name in command.names
        }
        self._answers = [answer for answer in table if isinstance(answer, Answer)]
        listed = [c for c in table if isinstance(c, Command) and c.usage]
        self.help = "\n".join([INTRO, *(f"{' or '.join(c.names)}: {c.usage}" for c in listed)])
        """What /help says."""

    def named(self, inbound: Inbound) -> Command | None:
        """The command the message calls by name, if any."""
        text = inbound.text.strip()
        if not text.startswith("/"):
            return None
        return self._named.get(text.split(maxsplit=1)[0].lower())

    async def on_arrival(self, ctx: Context, inbound: Inbound) -> Admitted | None:
        """The verdict on an answer, persisted as handled (a redelivery answers nothing);
        None for any other message, which admission decides."""
        for answer in self._answers:
            if await answer.claims(ctx, inbound):
                if await ctx.state.accept(inbound, ignored=True):
                    return Admitted(verdict=Verdict.ANSWER, reply=await answer.run(ctx, inbound))
                return Admitted(verdict=Verdict.DROP)
        return None
