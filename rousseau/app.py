"""Assemble the pieces named in a Config into a working Agent (used by the CLI and daemon)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from rousseau.agent import (
    Agent,
    AllowAllApprover,
    Approver,
    AskingApprover,
    Compressor,
    DenyAllApprover,
    LLMCompressor,
    NoopCompressor,
    Options,
    PatternApprover,
    PatternRule,
    Provider,
    default_rules,
)
from rousseau.agent.approval import AskFn
from rousseau.config import ApproverConfig, Config
from rousseau.state import Store
from rousseau.tools import Registry, builtin_registry


def build_approver(config: Config, ask: AskFn | None = None) -> Approver:
    """The configured policy. `ask` is how to put a question to a present person, if any."""
    ac = config.agent.approver
    if ac is None:
        return AskingApprover(rules=default_rules(), ask=ask) if ask else default_rules()
    if ac.mode == "allow_all":
        return AllowAllApprover()
    if ac.mode == "deny_all":
        return DenyAllApprover(ac.reason or "tool use is disabled by configuration")
    rules = _pattern(ac)
    if ac.mode == "ask" and ask is not None:
        return AskingApprover(rules=rules, ask=ask)
    return rules


def _pattern(ac: ApproverConfig) -> PatternApprover:
    return PatternApprover(
        allow=[PatternRule(tool=r.tool, match=r.match) for r in ac.allow],
        deny=[PatternRule(tool=r.tool, match=r.match) for r in ac.deny],
        default=ac.default,
        reason=ac.reason,
    )


def build_registry(config: Config) -> Registry:
    return builtin_registry(
        Path(config.agent.workspace).expanduser(),
        bash_timeout=config.agent.bash_timeout,
        secrets=config.secrets(),
    )


def build_compressor(config: Config, provider: Provider) -> Compressor:
    c = config.agent.compression
    if not c.enabled:
        return NoopCompressor()
    return LLMCompressor(
        provider, trigger_messages=c.trigger_messages, keep_recent=c.keep_recent, prompt=c.prompt
    )


def build_agent(
    config: Config,
    provider: Provider,
    store: Store | None,
    *,
    ask: AskFn | None = None,
    registry: Registry | None = None,
) -> Agent:
    from rousseau.skills import Skills
    from rousseau.state.recall import SQLiteRecall

    recall = config.agent.recall
    options = Options(
        system_prompt=config.agent.system_prompt,
        max_iterations=config.agent.max_iterations,
        approver=build_approver(config, ask),
        compressor=build_compressor(config, provider),
        history=store,
        audit=store,
        skills=Skills(config.agent.skills_dir),
        recall=(
            SQLiteRecall(store, recall.top_k, recall.scope)
            if store is not None and recall.enabled
            else None
        ),
    )
    return Agent(provider, registry if registry is not None else build_registry(config), options)


@asynccontextmanager
async def connected_agent(
    config: Config, provider: Provider, store: Store | None, *, ask: AskFn | None = None
) -> AsyncIterator[Agent]:
    """`build_agent`, with the configured MCP servers' tools connected while it is in use."""
    from rousseau.mcp.client import mcp_tools

    registry = build_registry(config)
    async with mcp_tools(config.mcp_servers, registry):
        yield build_agent(config, provider, store, ask=ask, registry=registry)
