"""Approval in chat: a tool call that needs a person is put to the owners as a message with
an id; `yes ID` or `no ID` from an owner settles it; silence past the timeout denies.

Several requests may wait at once, each settled on its own. The router hands every inbound
message here first: an answer is taken (and never reaches the model), anything else is an
ordinary message.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import structlog

from rousseau.agent import ApprovalRequest, Decision
from rousseau.transports.base import Inbound, current_inbound

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
PREVIEW = 400


@dataclass(kw_only=True)
class _Pending:
    request: ApprovalRequest
    owners: frozenset[str]
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
        self, *, owners: Sequence[str] = (), timeout: float = 300.0, notify: Notify | None = None
    ) -> None:
        self.owners = frozenset(owners)
        """`transport:sender` ids; none configured: whoever asked for the turn decides."""
        self.timeout = timeout
        self.notify = notify
        self.waiting: Callable[[], AbstractAsyncContextManager[None]] = _nowhere
        """Held while a turn waits for an answer (the router frees the turn's slot)."""
        self.pending: dict[str, _Pending] = {}
        self._issued: OrderedDict[str, None] = OrderedDict()

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
        asking = current_inbound.get()
        owners = self.owners or (
            frozenset({f"{asking.transport}:{asking.sender_id}"}) if asking else frozenset()
        )
        if not owners or self.notify is None:
            return Decision.denied("there is no one to ask for approval", by="no owner")
        if len(self.pending) >= MAX_PENDING:
            return Decision.denied("too many approvals are waiting", by="approvals full")
        code = self._code()
        pending = self.pending[code] = _Pending(request=request, owners=owners)
        preview = json.dumps(request.input, ensure_ascii=False)
        if len(preview) > PREVIEW:
            preview = preview[:PREVIEW] + " …"
        text = (
            f"Approve {request.tool}? [{code}]\n{preview}\n"
            f"Answer: yes {code} or no {code} (within {_minutes(self.timeout)})"
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
                with anyio.move_on_after(self.timeout):
                    await pending.done.wait()
        finally:
            self.pending.pop(code, None)
        if pending.decision is None:
            log.info("approvals.timed_out", code=code, tool=request.tool)
            return Decision.denied(
                f"no answer within {_minutes(self.timeout)}", by="timeout: no answer"
            )
        return pending.decision

    def is_answer(self, text: str) -> bool:
        """`yes ID` / `no ID` naming a code this gave out; "no thanks" is just a message."""
        match = ANSWER.match(text)
        return match is not None and match.group(2).upper() in self._issued

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
        pending.decision = (
            Decision.allowed(by=f"owner {who}")
            if allow
            else Decision.denied(f"{who} said no", by=f"owner {who}")
        )
        pending.done.set()
        log.info("approvals.answered", code=code, allow=allow, by=who)
        return f"{'Approved' if allow else 'Denied'} {code}."
