"""Approval policies: every tool call passes one before it runs."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rousseau.agent.types import ToolUse


@dataclass(kw_only=True, slots=True)
class ApprovalRequest:
    """A tool call awaiting a decision."""

    session_id: str
    tool_use: ToolUse
    unattended: bool = False
    """True for cron and other turns nobody is watching: they must never wait on a person."""

    @property
    def tool(self) -> str:
        return self.tool_use.name

    @property
    def input(self) -> dict[str, Any]:
        return self.tool_use.input


@dataclass(kw_only=True, slots=True, frozen=True)
class Decision:
    """Allow or deny, with the reason the model sees on a denial."""

    allow: bool
    reason: str = ""

    @classmethod
    def allowed(cls) -> Decision:
        return cls(allow=True)

    @classmethod
    def denied(cls, reason: str) -> Decision:
        return cls(allow=False, reason=reason)


class Approver(Protocol):
    async def approve(self, request: ApprovalRequest) -> Decision: ...


class AllowAllApprover:
    """Lets every call through. For trusted, sandboxed setups only."""

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.allowed()


class DenyAllApprover:
    """Refuses every call with a fixed reason."""

    def __init__(self, reason: str = "tool use is disabled") -> None:
        self.reason = reason

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.denied(self.reason or "tool use is disabled")


@dataclass(kw_only=True, slots=True)
class PatternRule:
    """Matches calls to `tool` ("*": any tool) whose compact input JSON matches `match`."""

    tool: str
    match: str = ""
    """A regular expression; empty matches every input."""


class _CompiledRule:
    __slots__ = ("error", "regex", "rule")

    def __init__(self, rule: PatternRule) -> None:
        self.rule = rule
        self.regex: re.Pattern[str] | None = None
        self.error = ""
        try:
            self.regex = re.compile(rule.match)
        except re.error as exc:
            self.error = f"bad pattern {rule.match!r} for tool {rule.tool!r}: {exc}"

    def applies_to(self, tool: str) -> bool:
        return self.rule.tool in ("*", tool)


Verdict = Literal["allow", "deny"]


class PatternApprover:
    """Regex rules per tool name; deny wins, unmatched calls get `default` (empty means deny).

    A rule whose regex does not compile denies every call to its tool, with the compile error
    as the reason, so a typo never opens a door.
    """

    def __init__(
        self,
        allow: Sequence[PatternRule] = (),
        deny: Sequence[PatternRule] = (),
        default: str = "deny",
        reason: str = "",
    ) -> None:
        if default not in ("", "allow", "deny"):
            raise ValueError(f"default must be 'allow' or 'deny', not {default!r}")
        self._allow = [_CompiledRule(r) for r in allow]
        self._deny = [_CompiledRule(r) for r in deny]
        self.default: Verdict = "allow" if default == "allow" else "deny"
        self.reason = reason

    def match(self, request: ApprovalRequest) -> Decision | None:
        """The decision the rules settle, or None when no rule matches."""
        tool = request.tool
        rules = [r for r in (*self._deny, *self._allow) if r.applies_to(tool)]
        broken = next((r for r in rules if r.error), None)
        if broken is not None:
            return Decision.denied(broken.error)
        if not rules:
            return None
        raw = request.tool_use.input_json()
        for r in self._deny:
            if r.applies_to(tool) and r.regex is not None and r.regex.search(raw):
                return Decision.denied(
                    self.reason or f"denied by rule: {r.rule.tool} matches {r.rule.match!r}"
                )
        for r in self._allow:
            if r.applies_to(tool) and r.regex is not None and r.regex.search(raw):
                return Decision.allowed()
        return None

    async def approve(self, request: ApprovalRequest) -> Decision:
        decision = self.match(request)
        if decision is not None:
            return decision
        if self.default == "allow":
            return Decision.allowed()
        return Decision.denied(self.reason or f"tool {request.tool!r} is not allowed by policy")


AskFn = Callable[[ApprovalRequest], Awaitable[bool]]


@dataclass(kw_only=True, slots=True)
class AskingApprover:
    """Rules first; a call they do not settle is put to a person via `ask`.

    Unattended turns never wait: an unsettled call is denied.
    """

    rules: PatternApprover
    ask: AskFn
    declined_reason: str = "the user declined this tool call"
    unattended_reason: str = "no one is present to approve this tool call"

    async def approve(self, request: ApprovalRequest) -> Decision:
        decision = self.rules.match(request)
        if decision is not None:
            return decision
        if request.unattended:
            return Decision.denied(self.unattended_reason)
        if await self.ask(request):
            return Decision.allowed()
        return Decision.denied(self.declined_reason)


def default_rules() -> PatternApprover:
    """With no approver configured: read and grep run, everything else is refused."""
    return PatternApprover(
        allow=[PatternRule(tool="read"), PatternRule(tool="grep")],
        default="deny",
    )
