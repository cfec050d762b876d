"""Approval in chat: a tool call that needs a person is put to the owners as a message with
an id; `yes ID` or `no ID` from an owner settles it; silence past the timeout denies.

Several requests may wait at once, each settled on its own. The router hands every inbound
message here first: an answer is taken (and never reaches the model), anything else is an
ordinary message. Where daemons share the state, a `Relay` carries requests and answers
between them.

What the owner reads is rendered by render.py; the answer is bound to the digest of that
input, so what runs is what was approved.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import structlog

from rousseau.agent import ApprovalRequest, Decision, Splitter
from rousseau.agent.approval import AskFn
from rousseau.approvals.render import preview, visible
from rousseau.approvals.shell import SPLITTERS
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
        also: Sequence[str] = (),
        timeout: float = 300.0,
        notify: Notify | None = None,
        splitters: Mapping[str, Splitter] | None = None,
    ) -> None:
        self.owners = frozenset(owners)
        """`transport:sender` ids; none configured: whoever asked for the turn decides."""
        self.also = frozenset(also)
        """Who may answer every request besides its owners (the owner logged in to the web
        face, `web:owner`, who can answer on the dashboard anyway)."""
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
        if who not in owners and who not in self.also:
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
            self._decide(code, allow, who, trusted=who in self.also)

    def answer(self, inbound: Inbound) -> str:
        """Settle the request an answer names; the reply for its sender."""
        match = ANSWER.match(inbound.text)
        assert match is not None
        verb, code = match.group(1).lower(), match.group(2).upper()
        pending = self.pending.get(code)
        if pending is None or pending.done.is_set():
            return f"There is no approval {code} waiting (it may have timed out)."
        who = f"{inbound.transport}:{inbound.sender_id}"
        if who not in pending.owners and who not in self.also:
            log.warning("approvals.refused", code=code, sender=who)
            return f"Only an owner can answer {code}."
        allow = verb in ("yes", "y", "approve")
        if not self._decide(code, allow, who, trusted=who in self.also):
            return f"There is no approval {code} waiting (it may have timed out)."
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
