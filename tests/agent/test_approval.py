"""Every approver rule: allow, deny wins, defaults, wildcards, bad regexes, asking."""

from __future__ import annotations

from typing import Any

import pytest

from rousseau.agent import (
    AllowAllApprover,
    ApprovalRequest,
    AskingApprover,
    Decision,
    DenyAllApprover,
    PatternApprover,
    PatternRule,
    ToolUse,
    default_rules,
)

pytestmark = pytest.mark.anyio


def req(tool: str, unattended: bool = False, **input: Any) -> ApprovalRequest:
    return ApprovalRequest(
        session_id="s", tool_use=ToolUse(id="t", name=tool, input=input), unattended=unattended
    )


async def test_allow_all_and_deny_all() -> None:
    assert (await AllowAllApprover().approve(req("bash", command="rm -rf /"))).allow
    decision = await DenyAllApprover("read-only mode").approve(req("read", path="a"))
    assert not decision.allow and decision.reason == "read-only mode"


async def test_allow_rule_matches_raw_input_json() -> None:
    a = PatternApprover(allow=[PatternRule(tool="bash", match=r'"command":"git (status|log)')])
    assert (await a.approve(req("bash", command="git status"))).allow
    assert not (await a.approve(req("bash", command="git push"))).allow
    # The rule is for bash only.
    assert not (await a.approve(req("write", command="git status"))).allow


async def test_deny_wins_over_allow() -> None:
    a = PatternApprover(
        allow=[PatternRule(tool="bash", match="")],
        deny=[PatternRule(tool="bash", match=r"rm\s+-rf")],
    )
    assert (await a.approve(req("bash", command="ls"))).allow
    decision = await a.approve(req("bash", command="rm -rf build"))
    assert not decision.allow and "rm" in decision.reason


async def test_unmatched_uses_default() -> None:
    allow_default = PatternApprover(default="allow", deny=[PatternRule(tool="bash")])
    assert (await allow_default.approve(req("write", path="x", content="y"))).allow
    assert not (await allow_default.approve(req("bash", command="ls"))).allow
    deny_default = PatternApprover(default="deny")
    assert not (await deny_default.approve(req("read", path="x"))).allow


async def test_empty_default_means_deny() -> None:
    a = PatternApprover(default="")
    decision = await a.approve(req("read", path="x"))
    assert not decision.allow and "read" in decision.reason


async def test_wildcard_tool_rule() -> None:
    a = PatternApprover(allow=[PatternRule(tool="*", match=r'"path":"docs/')])
    assert (await a.approve(req("write", path="docs/a.md", content=""))).allow
    assert (await a.approve(req("read", path="docs/b.md"))).allow
    assert not (await a.approve(req("read", path="src/b.py"))).allow


async def test_bad_regex_denies_with_compile_error() -> None:
    a = PatternApprover(allow=[PatternRule(tool="bash", match="([unclosed")], default="allow")
    decision = await a.approve(req("bash", command="ls"))
    assert not decision.allow
    assert "bad pattern" in decision.reason and "unterminated character set" in decision.reason
    # Other tools are unaffected by the broken bash rule.
    assert (await a.approve(req("read", path="x"))).allow


async def test_bad_regex_in_deny_rule_still_denies() -> None:
    a = PatternApprover(deny=[PatternRule(tool="bash", match="*oops")], default="allow")
    assert not (await a.approve(req("bash", command="ls"))).allow


async def test_custom_reason() -> None:
    a = PatternApprover(reason="ask the owner first")
    assert (await a.approve(req("bash", command="ls"))).reason == "ask the owner first"


async def test_invalid_default_is_rejected() -> None:
    with pytest.raises(ValueError, match="default"):
        PatternApprover(default="maybe")


async def test_default_rules_allow_read_grep_and_memory() -> None:
    rules = default_rules()
    assert (await rules.approve(req("read", path="a"))).allow
    assert (await rules.approve(req("grep", pattern="x"))).allow
    assert (await rules.approve(req("memory", action="add", text="likes tea"))).allow
    for tool in ("write", "edit", "bash"):
        assert not (await rules.approve(req(tool))).allow


async def test_asking_approver_asks_only_when_rules_are_silent() -> None:
    asked: list[str] = []
    answer = {"value": True}

    async def ask(request: ApprovalRequest) -> bool:
        asked.append(request.tool)
        return answer["value"]

    a = AskingApprover(
        rules=PatternApprover(
            allow=[PatternRule(tool="read")], deny=[PatternRule(tool="bash", match="sudo")]
        ),
        ask=ask,
    )
    assert (await a.approve(req("read", path="x"))).allow
    assert not (await a.approve(req("bash", command="sudo ls"))).allow
    assert asked == []
    assert (await a.approve(req("bash", command="ls"))).allow
    answer["value"] = False
    decision = await a.approve(req("write", path="x", content=""))
    assert not decision.allow and "declined" in decision.reason
    assert asked == ["bash", "write"]


async def test_asking_approver_never_waits_when_unattended() -> None:
    async def ask(request: ApprovalRequest) -> bool:
        raise AssertionError("must not ask")

    a = AskingApprover(rules=default_rules(), ask=ask)
    decision = await a.approve(req("bash", unattended=True, command="ls"))
    assert not decision.allow and "no one is present" in decision.reason


async def test_a_splitter_makes_every_part_need_an_allow_rule() -> None:
    def words(input: dict[str, Any]) -> list[str] | None:
        text = input.get("command", "")
        return text.split("+") if "?" not in text else None

    a = PatternApprover(
        allow=[PatternRule(tool="bash", match="^a$"), PatternRule(tool="bash", match="^b$")],
        deny=[PatternRule(tool="bash", match="^z$")],
        splitters={"bash": words},
    )
    decision = await a.approve(req("bash", command="a+b+a"))
    assert decision.allow and decision.by == "rule: allow bash '^a$', bash '^b$'"
    assert not (await a.approve(req("bash", command="a+c"))).allow
    assert not (await a.approve(req("bash", command="a?"))).allow  # unsplittable: the default
    denied = await a.approve(req("bash", command="a+z"))  # deny rules see each part too
    assert not denied.allow and denied.by == "rule: deny bash '^z$'"


async def test_a_failing_splitter_never_allows() -> None:
    def broken(input: dict[str, Any]) -> list[str] | None:
        raise RuntimeError("boom")

    a = PatternApprover(allow=[PatternRule(tool="bash", match="ls")], splitters={"bash": broken})
    assert not (await a.approve(req("bash", command="ls"))).allow


async def test_a_persons_yes_is_bound_to_the_input_they_saw() -> None:
    seen: list[str] = []

    async def yes(request: ApprovalRequest) -> bool:
        seen.append(request.digest())
        return True

    a = AskingApprover(rules=PatternApprover(), ask=yes)
    request = req("bash", command="ls")
    decision = await a.approve(request)
    assert decision.allow and decision.digest == seen[0] == request.digest()

    async def yes_to_something_else(request: ApprovalRequest) -> Decision:
        return Decision.allowed(by="owner", digest="0" * 64)

    stale = await AskingApprover(rules=PatternApprover(), ask=yes_to_something_else).approve(
        req("bash", command="ls")
    )
    assert not stale.allow and "changed after it was approved" in stale.reason
