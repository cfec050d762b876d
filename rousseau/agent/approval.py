"""Approval policies: every tool call passes one before it runs."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog

from rousseau.agent.types import ToolUse

log = structlog.get_logger("rousseau.agent")


def input_digest(use: ToolUse) -> str:
    """sha256 (hex) of the call's exact compact input JSON: what a decision is bound to."""
    return hashlib.sha256(use.input_json().encode("utf-8", "surrogatepass")).hexdigest()


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

    def digest(self) -> str:
        """The input's digest now (see `input_digest`)."""
        return input_digest(self.tool_use)


@dataclass(kw_only=True, slots=True, frozen=True)
class Decision:
    """Allow or deny, with the reason the model sees on a denial."""

    allow: bool
    reason: str = ""
    by: str = ""
    """Who or what decided, for the audit trail: a rule, the policy, a person, a timeout."""
    digest: str = ""
    """The `input_digest` of the input this decision was made on, if it is bound to one:
    the loop refuses to run an allowed call whose input no longer has this digest."""

    @classmethod
    def allowed(cls, by: str = "", digest: str = "") -> Decision:
        return cls(allow=True, by=by, digest=digest)

    @classmethod
    def denied(cls, reason: str, by: str = "") -> Decision:
        return cls(allow=False, reason=reason, by=by)


class Approver(Protocol):
    """Decides each tool call before it runs (see PatternApprover, AskingApprover)."""

    async def approve(self, request: ApprovalRequest) -> Decision: ...


class AllowAllApprover:
    """Lets every call through. For trusted, sandboxed setups only."""

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.allowed(by="policy: allow_all")


class DenyAllApprover:
    """Refuses every call with a fixed reason."""

    def __init__(self, reason: str = "tool use is disabled") -> None:
        self.reason = reason

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.denied(self.reason or "tool use is disabled", by="policy: deny_all")


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

Splitter = Callable[[Mapping[str, Any]], list[str] | None]
"""The parts of a call that allow rules must each match (a shell line's simple commands,
substitutions and redirections), or None when the input cannot be split (unparsable)."""


def _label(rule: PatternRule) -> str:
    return f"{rule.tool} {rule.match!r}" if rule.match else rule.tool


class PatternApprover:
    """Regex rules per tool name; deny wins, unmatched calls get `default` (empty means deny).

    A rule whose regex does not compile denies every call to its tool, with the compile error
    as the reason, so a typo never opens a door.

    A tool with a splitter (`splitters`, by tool name) is allowed by rules only when every part
    the splitter returns is matched by some allow rule; a call it cannot split is left to the
    default or a person, unless an allow rule with an empty `match` trusts the whole tool.
    Deny and ask rules see the raw input JSON and every part.
    """

    def __init__(
        self,
        allow: Sequence[PatternRule] = (),
        deny: Sequence[PatternRule] = (),
        default: str = "deny",
        reason: str = "",
        ask: Sequence[PatternRule] = (),
        splitters: Mapping[str, Splitter] | None = None,
    ) -> None:
        if default not in ("", "allow", "deny"):
            raise ValueError(f"default must be 'allow' or 'deny', not {default!r}")
        self._allow = [_CompiledRule(r) for r in allow]
        self._deny = [_CompiledRule(r) for r in deny]
        self._ask = [_CompiledRule(r) for r in ask]
        self.default: Verdict = "allow" if default == "allow" else "deny"
        self.reason = reason
        self.splitters: Mapping[str, Splitter] = dict(splitters or {})

    def parts(self, tool: str, input: Mapping[str, Any], raw: str) -> list[str] | None:
        """What allow rules must each match: the splitter's parts, or the raw input JSON for
        a tool without one; None when the splitter cannot read the input."""
        split = self.splitters.get(tool)
        if split is None:
            return [raw]
        try:
            found = split(input)
        except Exception:
            log.exception("agent.splitter_failed", tool=tool)
            return None
        return list(found) if found else None

    def settle(self, request: ApprovalRequest) -> Decision | Literal["ask"] | None:
        """What the rules say: a decision, "ask" (a person must decide), or None (no rule
        matches). Deny rules win over ask rules, ask rules over allow rules."""
        tool = request.tool
        rules = [r for r in (*self._deny, *self._ask, *self._allow) if r.applies_to(tool)]
        broken = next((r for r in rules if r.error), None)
        if broken is not None:
            return Decision.denied(broken.error, by="rule: broken pattern")
        if not rules:
            return None
        raw = request.tool_use.input_json()
        parts = self.parts(tool, request.input, raw)
        seen = [raw, *(p for p in parts or () if p != raw)]

        def hit(found: list[_CompiledRule], subjects: list[str]) -> _CompiledRule | None:
            return next(
                (
                    r
                    for r in found
                    if r.applies_to(tool) and r.regex and any(r.regex.search(s) for s in subjects)
                ),
                None,
            )

        if (r := hit(self._deny, seen)) is not None:
            return Decision.denied(
                self.reason or f"denied by rule: {r.rule.tool} matches {r.rule.match!r}",
                by=f"rule: deny {_label(r.rule)}",
            )
        if hit(self._ask, seen) is not None:
            return "ask"
        if tool in self.splitters:
            whole = next((r for r in self._allow if r.applies_to(tool) and not r.rule.match), None)
            if whole is not None:
                return Decision.allowed(by=f"rule: allow {_label(whole.rule)}")
        if not parts:
            return None
        used: list[_CompiledRule] = []
        for part in parts:
            r = hit(self._allow, [part])
            if r is None:
                return None
            if r not in used:
                used.append(r)
        return Decision.allowed(by="rule: allow " + ", ".join(_label(r.rule) for r in used))

    def match(self, request: ApprovalRequest) -> Decision | None:
        """The decision the rules settle, or None when a person or the default must decide."""
        found = self.settle(request)
        return found if isinstance(found, Decision) else None

    async def approve(self, request: ApprovalRequest) -> Decision:
        found = self.settle(request)
        if found == "ask":
            return Decision.denied(
                "this call needs a person's approval and there is no one to ask here",
                by="rule: ask (no one to ask)",
            )
        if isinstance(found, Decision):
            return found
        return self.fallback(request)

    def fallback(self, request: ApprovalRequest) -> Decision:
        """The default for a call no rule matches."""
        if self.default == "allow":
            return Decision.allowed(by="policy default: allow")
        return Decision.denied(
            self.reason or f"tool {request.tool!r} is not allowed by policy",
            by="policy default: deny",
        )


AskFn = Callable[[ApprovalRequest], Awaitable["bool | Decision"]]
"""Put a call to a person: True/False, or a Decision saying who decided."""


@dataclass(kw_only=True, slots=True)
class AskingApprover:
    """Rules first; a call they send to a person (an ask rule, or with `ask_unmatched`, any
    call no rule matches) is put to one via `ask`.

    Unattended turns never wait: a call that would ask is denied.
    """

    rules: PatternApprover
    ask: AskFn
    ask_unmatched: bool = True
    declined_reason: str = "the user declined this tool call"
    unattended_reason: str = "no one is present to approve this tool call"

    async def approve(self, request: ApprovalRequest) -> Decision:
        found = self.rules.settle(request)
        if isinstance(found, Decision):
            return found
        if found is None and not self.ask_unmatched:
            return self.rules.fallback(request)
        if request.unattended:
            return Decision.denied(self.unattended_reason, by="unattended: nobody to ask")
        asked = request.digest()
        answer = await self.ask(request)
        if not isinstance(answer, Decision):
            answer = (
                Decision.allowed(by="person")
                if answer
                else Decision.denied(self.declined_reason, by="person")
            )
        if not answer.allow:
            return answer
        # A person approved what they were shown: bind the answer to that input.
        if request.digest() != asked or answer.digest not in ("", asked):
            return input_changed(answer.by)
        return dataclasses.replace(answer, digest=asked)


def input_changed(by: str = "") -> Decision:
    """The denial of an approved call whose input is no longer what was approved."""
    return Decision.denied(
        "the call's input changed after it was approved, so it was not run",
        by=f"input changed after approval ({by})" if by else "input changed after approval",
    )


def default_rules() -> PatternApprover:
    """With no approver configured: read and grep run, and memory (it writes only to the
    profile of the person talking, which they see and erase with /memory and /forget);
    everything else is refused."""
    return PatternApprover(
        allow=[PatternRule(tool="read"), PatternRule(tool="grep"), PatternRule(tool="memory")],
        default="deny",
    )
