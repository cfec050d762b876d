"""Approval in chat: a tool call that needs a person is put to the owners as a message with
an id; `yes ID` or `no ID` from an owner settles it; silence past the timeout denies.

Several requests may wait at once, each settled on its own. The router hands every inbound
message here first: an answer is taken (and never reaches the model), anything else is an
ordinary message.

What the owner reads is all of the call (`preview`: nothing invisible, nothing cut from its
end) and the answer is bound to the digest of that input, so what runs is what was approved.
`split_bash` reads a shell line into the parts that bash allow rules must each match.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import unicodedata
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog

from rousseau.agent import ApprovalRequest, Decision, Splitter
from rousseau.agent.approval import AskFn
from rousseau.messages import Inbound, current_inbound

log = structlog.get_logger("rousseau.approvals")


class Notify(Protocol):
    """Queue a message (with answer buttons where the platform has them) for a chat."""

    def __call__(
        self, transport: str, chat_id: str, text: str, buttons: tuple[str, ...] = ()
    ) -> Awaitable[int]: ...


ANSWER = re.compile(r"^\s*(yes|y|approve|no|n|deny)\s+#?([A-Za-z0-9]{4,8})\s*[.!]?\s*$", re.I)
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
MAX_PENDING = 100
ISSUED_KEPT = 1000  # codes remembered after they are settled: a late answer is told so
PREVIEW_HEAD = 1200  # characters of a long input shown before the gap...
PREVIEW_TAIL = 600  # ...and after it, so that its end is always in sight
PART_HEAD, PART_TAIL = 160, 60  # the same for each listed command
PARTS_SHOWN = 30  # commands listed one a line; past that, the first and last half of these


class Relay(Protocol):
    """Where several daemons share the state: a request asked on one daemon may be answered
    on any (state/postgres_daemon.py keeps them in PostgreSQL and tells the asker)."""

    async def publish(self, code: str, owners: frozenset[str]) -> bool:
        """Make a request known to every daemon; False if its code is taken already."""
        ...

    async def owners_of(self, code: str) -> frozenset[str] | None:
        """Who may answer a waiting request; None if no daemon waits for that code."""
        ...

    async def send_answer(self, code: str, allow: bool, who: str) -> bool:
        """Settle the request on the daemon that asked; False if it was settled before."""
        ...

    async def withdraw(self, code: str) -> None:
        """The request is settled or given up: forget it."""
        ...

    def answers(self) -> AsyncIterator[tuple[str, bool, str]]:
        """Answers given on any daemon to this daemon's requests: (code, allow, who)."""
        ...


@dataclass(kw_only=True)
class _Pending:
    request: ApprovalRequest
    owners: frozenset[str]
    digest: str
    """Of the input the owners were shown; a yes approves that input only."""
    done: anyio.Event = field(default_factory=anyio.Event)
    decision: Decision | None = None


@asynccontextmanager
async def _nowhere() -> AsyncIterator[None]:
    yield


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


class ChatApprovals:
    """The `ask` of an AskingApprover, answered in chat."""

    def __init__(
        self,
        *,
        owners: Sequence[str] = (),
        timeout: float = 300.0,
        notify: Notify | None = None,
        splitters: Mapping[str, Splitter] | None = None,
    ) -> None:
        self.owners = frozenset(owners)
        """`transport:sender` ids; none configured: whoever asked for the turn decides."""
        self.timeout = timeout
        self.notify = notify
        self.splitters: Mapping[str, Splitter] = SPLITTERS if splitters is None else splitters
        """How a call's parts are listed under its input (bash: its simple commands)."""
        self.waiting: Callable[[], AbstractAsyncContextManager[None]] = _nowhere
        """Held while a turn waits for an answer (the router frees the turn's slot)."""
        self.pending: dict[str, _Pending] = {}
        self._issued: OrderedDict[str, None] = OrderedDict()
        self.relay: Relay | None = None
        """Where daemons share the state: how requests are answered across them (`hear`)."""

    def _code(self) -> str:
        """A code not given out recently, so a late answer cannot settle a newer request."""
        while True:
            code = "".join(secrets.choice(_ALPHABET) for _ in range(4))
            if code not in self._issued:
                self._issued[code] = None
                while len(self._issued) > ISSUED_KEPT:
                    self._issued.popitem(last=False)
                return code

    async def ask(self, request: ApprovalRequest) -> Decision:
        return await self._ask(self.owners, self.timeout, request)

    def asking(self, owners: Sequence[str], timeout: float) -> AskFn:
        """An `ask` whose questions go to these owners with this timeout (one agent's, where
        agents have approvers of their own); answered like any other here."""
        return functools.partial(self._ask, frozenset(owners), timeout)

    async def _ask(self, owners: frozenset[str], wait: float, request: ApprovalRequest) -> Decision:
        asking = current_inbound.get()
        owners = owners or (
            frozenset({f"{asking.transport}:{asking.sender_id}"}) if asking else frozenset()
        )
        if not owners or self.notify is None:
            return Decision.denied("there is no one to ask for approval", by="no owner")
        if len(self.pending) >= MAX_PENDING:
            return Decision.denied("too many approvals are waiting", by="approvals full")
        code = self._code()
        while self.relay is not None and not await self.relay.publish(code, owners):
            code = self._code()  # another daemon gave this one out
        # What the owner reads and the digest their answer is bound to come from one snapshot.
        digest = request.digest()
        shown = preview(request.tool, request.input, self.splitters)
        pending = self.pending[code] = _Pending(request=request, owners=owners, digest=digest)
        text = (
            f"Approve {visible(request.tool, 60, 20)}? [{code}]\n{shown}\n"
            f"Input sha256 {digest[:16]} (as in `rousseau audit`)\n"
            f"Answer: yes {code} or no {code} (within {_minutes(wait)})"
        )
        # to the chat that asked and to each owner's private chat (sender id = chat id there)
        targets = {(owner.partition(":")[0], owner.partition(":")[2]) for owner in owners}
        if asking is not None:
            targets.add((asking.transport, asking.chat_id))
        log.info("approvals.asked", code=code, tool=request.tool, owners=sorted(owners))
        try:
            for transport, chat in sorted(targets):
                await self.notify(transport, chat, text, (f"yes {code}", f"no {code}"))
            async with self.waiting():
                with anyio.move_on_after(wait):
                    await pending.done.wait()
        finally:
            self.pending.pop(code, None)
            if self.relay is not None:
                with anyio.CancelScope(shield=True):
                    await self.relay.withdraw(code)
        if pending.decision is None:
            log.info("approvals.timed_out", code=code, tool=request.tool)
            return Decision.denied(f"no answer within {_minutes(wait)}", by="timeout: no answer")
        return pending.decision

    def is_answer(self, text: str) -> bool:
        """`yes ID` / `no ID` naming a code this gave out; "no thanks" is just a message."""
        match = ANSWER.match(text)
        return match is not None and match.group(2).upper() in self._issued

    async def knows(self, text: str) -> bool:
        """`is_answer`, or (where daemons share the state) an answer to another daemon's."""
        if self.is_answer(text):
            return True
        match = ANSWER.match(text)
        if match is None or self.relay is None:
            return False
        return await self.relay.owners_of(match.group(2).upper()) is not None

    async def settle(self, inbound: Inbound) -> str:
        """`answer`, for a request of this daemon or (where daemons share the state) of
        another; the reply for its sender."""
        match = ANSWER.match(inbound.text)
        assert match is not None
        code = match.group(2).upper()
        if code in self.pending or self.relay is None:
            return self.answer(inbound)
        owners = await self.relay.owners_of(code)
        if owners is None:
            return f"There is no approval {code} waiting (it may have timed out)."
        who = f"{inbound.transport}:{inbound.sender_id}"
        if who not in owners:
            log.warning("approvals.refused", code=code, sender=who)
            return f"Only an owner can answer {code}."
        allow = match.group(1).lower() in ("yes", "y", "approve")
        if not await self.relay.send_answer(code, allow, who):
            return f"There is no approval {code} waiting (it may have timed out)."
        log.info("approvals.relayed", code=code, allow=allow, by=who)
        return f"{'Approved' if allow else 'Denied'} {code}."

    async def hear(self) -> None:
        """Take the answers other daemons relay to this one's requests, until cancelled."""
        assert self.relay is not None
        async for code, allow, who in self.relay.answers():
            self._decide(code, allow, who)

    def answer(self, inbound: Inbound) -> str:
        """Settle the request an answer names; the reply for its sender."""
        match = ANSWER.match(inbound.text)
        assert match is not None
        verb, code = match.group(1).lower(), match.group(2).upper()
        pending = self.pending.get(code)
        if pending is None or pending.done.is_set():
            return f"There is no approval {code} waiting (it may have timed out)."
        who = f"{inbound.transport}:{inbound.sender_id}"
        if who not in pending.owners:
            log.warning("approvals.refused", code=code, sender=who)
            return f"Only an owner can answer {code}."
        allow = verb in ("yes", "y", "approve")
        self._decide(code, allow, who)
        return f"{'Approved' if allow else 'Denied'} {code}."

    def decide(self, code: str, allow: bool, who: str) -> bool:
        """Settle a request of this daemon for someone already trusted as the owner (the
        web dashboard's login); False if nothing waits under that code."""
        return self._decide(code.upper(), allow, who, trusted=True)

    def _decide(self, code: str, allow: bool, who: str, *, trusted: bool = False) -> bool:
        pending = self.pending.get(code)
        if pending is None or pending.done.is_set() or not (trusted or who in pending.owners):
            return False
        pending.decision = (
            Decision.allowed(by=f"owner {who}", digest=pending.digest)
            if allow
            else Decision.denied(f"{who} said no", by=f"owner {who}")
        )
        pending.done.set()
        log.info("approvals.answered", code=code, allow=allow, by=who)
        return True


# -- what the owner reads ----------------------------------------------------------------

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.S)
SPACES_SHOWN = 4  # a longer run of spaces is shown as its count
RUN_SHOWN = 16  # a longer run of any other character is shown as its count


def _char(char: str) -> str:
    """A character as the owner can see it: controls, format characters (bidirectional
    overrides, zero-width joiners), separators and unassigned code points by their number."""
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char != " " and unicodedata.category(char)[0] in "CZ":
        return f"<U+{ord(char):04X}>"
    return char


def _json_tokens(text: str) -> list[str]:
    """JSON text as tokens, each escape (`\\n`, `\\u0007`) one token."""
    tokens: list[str] = []
    at = 0
    for escape in _JSON_ESCAPE.finditer(text):
        tokens += [_char(c) for c in text[at : escape.start()]]
        tokens.append(escape.group())
        at = escape.end()
    return tokens + [_char(c) for c in text[at:]]


def _collapse(tokens: list[str]) -> list[str]:
    """Runs of one token, past a few, become one token that counts them (`<420 spaces>`)."""
    out: list[str] = []
    at = 0
    while at < len(tokens):
        token, end = tokens[at], at + 1
        while end < len(tokens) and tokens[end] == token:
            end += 1
        count = end - at
        if token == " " and count > SPACES_SHOWN:
            out.append(f"<{count:,} spaces>")
        elif count > RUN_SHOWN:
            out.append(f"<{count:,} times {token.strip('<>')}>")
        else:
            out += tokens[at:end]
        at = end
    return out


def _elide(tokens: list[str], head: int, tail: int) -> str:
    """All of it, or its head and its tail with the count of characters between."""
    total = sum(map(len, tokens))
    if total <= head + tail:
        return "".join(tokens)
    first = last = 0
    shown_head = shown_tail = 0
    while shown_head + len(tokens[first]) <= head:
        shown_head += len(tokens[first])
        first += 1
    while shown_tail + len(tokens[-1 - last]) <= tail:
        shown_tail += len(tokens[-1 - last])
        last += 1
    hidden = total - shown_head - shown_tail
    tail_text = "".join(tokens[len(tokens) - last :]) if last else ""
    return f"{''.join(tokens[:first])}… {hidden:,} characters not shown …{tail_text}"


def visible(text: str, head: int = PART_HEAD, tail: int = PART_TAIL) -> str:
    """Text from outside (a command, a stranger's id) with nothing invisible in it and its
    end in sight, for a person to read."""
    return _elide(_collapse([_char(c) for c in text]), head, tail)


def preview(
    tool: str, input: Mapping[str, Any], splitters: Mapping[str, Splitter] | None = None
) -> str:
    """A call's input as an owner reads it: its compact JSON with nothing invisible and its
    end always shown, then (for a tool with a splitter, such as bash) its parts one a line."""
    raw = json.dumps(input, separators=(",", ":"), ensure_ascii=False)
    lines = [_elide(_collapse(_json_tokens(raw)), PREVIEW_HEAD, PREVIEW_TAIL)]
    split = (SPLITTERS if splitters is None else splitters).get(tool)
    if split is None:
        return lines[0]
    try:
        parts = split(input)
    except Exception:  # a splitter's failure only costs the listing
        parts = None
    if not parts:
        lines.append("Its commands could not be parsed: read the whole input above.")
    elif len(parts) > 1:
        lines.append(f"Parsed into {len(parts)} parts (commands, substitutions, redirections):")
        half = PARTS_SHOWN // 2
        numbered = list(enumerate(parts, 1))
        if len(parts) > PARTS_SHOWN:
            hidden = parts[half:-half]
            names = list(dict.fromkeys(visible(p.split(" ", 1)[0], 30, 10) for p in hidden))
            more = f", and {len(names) - 20:,} more" if len(names) > 20 else ""
            lines += [f"  {n}. {visible(p)}" for n, p in numbered[:half]]
            lines.append(
                f"  … {len(hidden):,} more not shown; they run {', '.join(names[:20])}{more}"
            )
            numbered = numbered[-half:]
        lines += [f"  {n}. {visible(p)}" for n, p in numbered]
    return "\n".join(lines)


# -- bash lines for rules -----------------------------------------------------------------


class _Unreadable(Exception):
    """The line holds something the parser does not take apart (so rules cannot see it)."""


_HIDDEN_CODE = ("`", "$(", "<(", ">(", "$[")
_QUIET_TARGETS = frozenset({"/dev/null"})


def _bashlex() -> Any:
    """The shell parser, imported on first use: it builds its tables on import (about 0.2 s)."""
    import bashlex  # type: ignore[import-untyped]  # no type information shipped

    return bashlex


def load_shell_parser() -> None:
    """Build the shell parser's tables now (the daemon does it on a thread at start-up),
    rather than on the event loop at the first approval."""
    _bashlex()


MAX_PARSED = 4096
"""Longer command lines are not parsed: only an explicit rule or a person can allow them."""


def split_bash(input: Mapping[str, Any]) -> list[str] | None:
    """A bash call's parts for allow rules: each simple command as written (its words, without
    its redirections), then the commands inside its substitutions (`$(…)`, backticks, `<(…)`)
    and each redirection to or from a file (`> out.txt`, `< in`, `2>> log`) as a part of its
    own. Duplicating a descriptor (`2>&1`) and `/dev/null` are not parts. None when the line
    cannot be parsed or hides code the parser does not open (`${x:-$(…)}`, a here-document
    that expands commands, arithmetic), or holds no command at all."""
    command = input.get("command")
    if not isinstance(command, str) or len(command) > MAX_PARSED:
        return None  # the parser is slow on long lines and runs on the event loop
    parts: list[str] = []
    try:
        for tree in _bashlex().parse(command):
            _walk(tree, command, parts)
    except Exception:  # bashlex says what it cannot read with several exception types
        return None
    return parts or None


def _walk(node: Any, source: str, parts: list[str]) -> None:
    kind = node.kind
    if kind == "command":
        words = [p for p in node.parts if p.kind != "redirect"]
        if words:
            parts.append(" ".join(source[w.pos[0] : w.pos[1]] for w in words))
        children = list(node.parts)
    elif kind == "redirect":
        _redirect(node, source, parts)
        return
    elif kind in ("commandsubstitution", "processsubstitution"):
        children = [node.command]
    elif kind in ("word", "assignment"):
        _check_word(node, source)
        children = list(node.parts)
    elif kind in ("parameter", "tilde", "reservedword", "operator", "pipe"):
        return
    elif kind in ("list", "pipeline", "compound", "if", "for", "while", "until", "function"):
        children = [*getattr(node, "parts", ()), *getattr(node, "list", ())]
        children += getattr(node, "redirects", ())
    else:
        raise _Unreadable(kind)
    for child in children:
        _walk(child, source, parts)


def _check_word(node: Any, source: str) -> None:
    """A word's text outside the substitutions the parser found holds no other code."""
    start, end = node.pos
    text = list(source[start:end])
    for sub in node.parts:
        if sub.kind in ("commandsubstitution", "processsubstitution"):
            text[sub.pos[0] - start : sub.pos[1] - start] = " " * (sub.pos[1] - sub.pos[0])
    rest = "".join(text)
    if any(mark in rest for mark in _HIDDEN_CODE):
        raise _Unreadable(rest)


def _redirect(node: Any, source: str, parts: list[str]) -> None:
    kind = node.type
    if kind in ("<<", "<<-"):
        body = node.heredoc.value if getattr(node, "heredoc", None) is not None else ""
        if any(mark in body for mark in _HIDDEN_CODE):
            raise _Unreadable(body)
        return
    target = node.output
    if isinstance(target, int) or target is None:
        return  # 2>&1, >&2: a descriptor, not a file
    _walk(target, source, parts)
    if kind == "<<<":
        return  # a here-string feeds its word, no file
    text = source[target.pos[0] : target.pos[1]]
    if text in _QUIET_TARGETS or (kind in (">&", "<&") and text == "-"):
        return
    fd = "" if getattr(node, "input", None) is None else str(node.input)
    parts.append(f"{fd}{kind} {text}")


SPLITTERS: Mapping[str, Splitter] = {"bash": split_bash}
"""The splitters the daemon, the CLI and the MCP server give their rules and previews."""
