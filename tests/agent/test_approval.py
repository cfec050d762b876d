"""Every approver rule: allow, deny wins, defaults, wildcards, bad regexes, asking."""

from __future__ import annotations

from typing import Any

import pytest

from rousseau.agent import (
    AllowAllApprover,
    ApprovalRequest,
    AskingApprover,
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


async def test_default_rules_allow_read_and_grep() -> None:
    rules = default_rules()
    assert (await rules.approve(req("read", path="a"))).allow
    assert (await rules.approve(req("grep", pattern="x"))).allow
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
