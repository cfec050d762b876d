"""One agent from its config: its approver, sandbox, tools, compressor, recall and media (for
the daemon and the commands alike)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import structlog

from rousseau.agent import (
    Agent,
    AllowAllApprover,
    Approver,
    AskingApprover,
    Attachment,
    Compressor,
    DenyAllApprover,
    Flush,
    LLMCompressor,
    NoopCompressor,
    Options,
    PatternApprover,
    PatternRule,
    Provider,
    default_rules,
)
from rousseau.agent.approval import AskFn
from rousseau.approvals import SPLITTERS, asking_what_shows
from rousseau.config import ApproverConfig, Config, RuleConfig
from rousseau.media import BlobStore, MediaIntake, save_to_workspace
from rousseau.messages import DEFAULT_AGENT
from rousseau.state import SessionStore
from rousseau.state.protocol import ProfileStore
from rousseau.tools import Registry, Sandbox, Subset, Tool, Workspace, builtin_registry
from rousseau.tools.hardening import make_undumpable

if TYPE_CHECKING:
    from rousseau.metrics import Metrics
    from rousseau.state.backend import Backend
    from rousseau.state.hybrid import Indexer, VectorRecall
    from rousseau.tools.memory import MemoryTool

log = structlog.get_logger("rousseau.assembly")

CLOSE_TIMEOUT = 10.0
"""Seconds any one tool may take to let go of what it holds."""


@runtime_checkable
class SupportsAclose(Protocol):
    """Something holding a connection or a client to let go of at the end (a provider, the
    transcriber, a web tool, the browser); what has nothing to close has no `aclose`."""

    async def aclose(self) -> None: ...


def build_approver(
    config: Config, ask: AskFn | None = None, section: ApproverConfig | None = None
) -> Approver:
    """The configured policy (`section`, default agent.approver). `ask` is how to put a
    question to a person (the terminal, the owners' chats), if anyone can be asked."""
    ac = section if section is not None else config.agent.approver
    if ask is not None:
        ask = asking_what_shows(ask, SPLITTERS)
    if ac is None:
        return AskingApprover(rules=default_rules(), ask=ask) if ask else default_rules()
    if ac.mode == "allow_all":
        return AllowAllApprover()
    if ac.mode == "deny_all":
        return DenyAllApprover(ac.reason or "tool use is disabled by configuration")
    rules = _pattern(ac)
    if ask is not None and (ac.mode == "ask" or ac.ask or any(r.action == "ask" for r in ac.rules)):
        return AskingApprover(rules=rules, ask=ask, ask_unmatched=ac.mode == "ask")
    return rules


def _pattern(ac: ApproverConfig) -> PatternApprover:
    def rules(plain: list[RuleConfig], action: str) -> list[PatternRule]:
        chosen = [*plain, *(r for r in ac.rules if r.action == action)]
        return [PatternRule(tool=r.tool, match=r.match) for r in chosen]

    allow = rules(ac.allow, "allow")
    for rule in allow:
        if rule.tool in SPLITTERS and '"command"' in rule.match:
            # Written for the input JSON, which allow rules for bash no longer see: it fails
            # closed (matches nothing), and says so.
            log.warning(
                "approver.json_rule_for_bash",
                tool=rule.tool,
                match=rule.match,
                hint="allow rules for bash match each simple command's text, e.g. '^git status'",
            )
    return PatternApprover(
        allow=allow,
        deny=rules(ac.deny, "deny"),
        ask=rules(ac.ask, "ask"),
        default=ac.default,
        reason=ac.reason,
        splitters=SPLITTERS,
    )


def build_sandbox(config: Config) -> Sandbox | None:
    agent = config.agent
    if agent.sandbox == "none":
        return None
    limits = agent.sandbox_limits
    hidden = [Path(config.state.path).expanduser()]
    if config.source:
        hidden.append(Path(config.source))
    return Sandbox(
        network=agent.sandbox_network,
        cpu_seconds=limits.cpu_seconds,
        memory_mb=limits.memory_mb,
        processes=limits.processes,
        hidden=tuple(p.resolve() for p in hidden),
        databases=(Path(config.state.path).expanduser().resolve(),),
    )


def build_registry(config: Config, agent: str = DEFAULT_AGENT) -> Registry:
    """The built-in tools, confined to the agent's workspace, and the web tools (a browser
    of `agent`'s own among them)."""
    from rousseau.tools.web import web_tools

    make_undumpable()  # bash must not read this process's environment or memory (hardening.py)
    workspace = Workspace(Path(config.agent.workspace).expanduser())
    registry = builtin_registry(
        workspace,
        bash_timeout=config.agent.bash_timeout,
        secrets=config.secrets(),
        sandbox=build_sandbox(config),
        bash_env=config.agent.bash_env,
    )
    for tool in web_tools(config, agent, tool_files(config)):
        registry.register(tool)
    for tool in plugin_tools(config, agent, workspace):
        registry.register(tool)
    return registry


def plugin_tools(config: Config, agent: str, workspace: Workspace) -> list[Tool]:
    """The tools of the configured tool plugins for `agent`; a plugin that did not load, or
    fails to make its tools, stops only itself (one line in the log)."""
    from rousseau.plugins import PluginError, ToolContext

    made: list[Tool] = []
    context = ToolContext(workspace=workspace, agent=agent)
    for name, configured in config.plugins.items():
        if configured.installed.kind == "tool":
            try:
                made.extend(configured.make(context))
            except PluginError as exc:
                log.error("plugins.failed", plugin=name, error=str(exc))
    return made


async def close_tools(registries: Iterable[Registry]) -> None:
    """Let go of what the tools hold (the browser and its Chromium, web_fetch's connections),
    each tool once, side by side, given CLOSE_TIMEOUT; a failure never skips the rest."""
    held = {id(t): t for r in registries for t in r.tools() if isinstance(t, SupportsAclose)}

    async def close(tool: SupportsAclose) -> None:
        try:
            with anyio.fail_after(CLOSE_TIMEOUT):
                await tool.aclose()
        except Exception as exc:  # TimeoutError included: a hung close is left behind
            log.warning("tools.close_failed", tool=type(tool).__name__, error=str(exc) or repr(exc))

    async with anyio.create_task_group() as tg:
        for tool in held.values():
            tg.start_soon(close, tool)


def build_compressor(config: Config, provider: Provider, flush: Flush | None = None) -> Compressor:
    """The configured compressor; `flush` runs before each summary (the memory flush)."""
    c = config.agent.compression
    if not c.enabled:
        return NoopCompressor()
    return LLMCompressor(
        provider,
        trigger_messages=c.trigger_messages,
        keep_recent=c.keep_recent,
        prompt=c.prompt,
        flush=flush,
    )


async def hybrid_recall(config: Config, backend: Backend) -> tuple[VectorRecall, Indexer] | None:
    """With `embeddings` (and vectors the store can keep): a turn's recall by meaning, and the
    indexer embedding every message in the background. Without the vector extension the
    store lacks, keyword recall alone, said once."""
    section = config.embeddings
    if section is None or backend.vectors is None:
        return None
    why = await backend.vectors.unavailable()
    if why is not None:
        log.warning("embeddings.unavailable", reason=why, recall="keywords only")
        return None
    from rousseau.providers.embeddings import Embeddings
    from rousseau.state.hybrid import Indexer, VectorRecall

    embeddings = Embeddings(section)
    return (
        VectorRecall(vectors=backend.vectors, embeddings=embeddings),
        Indexer(vectors=backend.vectors, embeddings=embeddings, batch_size=section.batch_size),
    )


def build_agent(
    config: Config,
    provider: Provider,
    store: SessionStore | None,
    *,
    ask: AskFn | None = None,
    registry: Registry | None = None,
    approver: Approver | None = None,
    name: str = DEFAULT_AGENT,
    profiles: ProfileStore | None = None,
    metrics: Metrics | None = None,
    meaning: VectorRecall | None = None,
    compaction: Provider | None = None,
) -> Agent:
    """The agent `config.agent` describes (see Config.for_agent for one of `agents:`),
    called `name`: its recall searches only its own sessions, and its memory (with
    `profiles`) keeps its own profiles of people; `metrics` counts its memory flushes;
    `meaning` (with `embeddings`) makes its recall find by meaning too; `compaction` writes
    its summaries and memory flushes (agent.models.compaction; unset: `provider`)."""
    from rousseau.skills import Skills
    from rousseau.state.recall import SQLiteRecall

    recall = config.agent.recall
    registry = registry if registry is not None else build_registry(config, name)
    allowed = config.agent.tools
    tools = registry if allowed is None else Subset(registry, allowed)
    approver = approver if approver is not None else build_approver(config, ask)
    memory = _memory(config, profiles, registry, name)
    flush = None
    if memory is not None and (allowed is None or Subset(registry, allowed).allows(memory.name)):
        from rousseau.tools.memory import MemoryFlush

        flush = MemoryFlush(
            compaction or provider, memory, approver, audit=store, counted=_counter(metrics)
        )
    options = Options(
        system_prompt=config.agent.system_prompt,
        max_iterations=config.agent.max_iterations,
        approver=approver,
        compressor=build_compressor(config, compaction or provider, flush),
        history_window=config.agent.history_messages,
        history=store,
        audit=store,
        skills=Skills(config.agent.skills_dir),
        recall=(
            SQLiteRecall(store, recall.top_k, recall.scope, agent=name, meaning=meaning)
            if store is not None and recall.enabled
            else None
        ),
        profile=memory.section if memory is not None else None,
        media=blob_store(config) if store is not None else None,
    )
    return Agent(provider, tools, options)


def _memory(
    config: Config, profiles: ProfileStore | None, registry: Registry, name: str
) -> MemoryTool | None:
    """The agent's memory tool, in its registry (once: a cron agent of its own shares the
    default agent's registry), where memory is on and profiles are kept."""
    section = config.agent.memory
    if profiles is None or not section.enabled:
        return None
    from rousseau.tools.memory import MemoryTool

    if MemoryTool.name in registry:
        found = registry.get(MemoryTool.name)
        return found if isinstance(found, MemoryTool) else None
    tool = MemoryTool(profiles, agent=name, max_chars=section.max_chars)
    registry.register(tool)
    return tool


def _counter(metrics: Metrics | None) -> Callable[[str], None] | None:
    """How a memory flush's outcome is counted, if there are metrics."""
    if metrics is None:
        return None
    counter = metrics.memory_flushes
    return lambda outcome: counter.labels(outcome).inc()


@dataclass(frozen=True, slots=True)
class ToolFiles:
    """What tools hand over: kept in the blob store (a screenshot the model is shown), or
    put in the workspace's inbox/ as inbound files are (a download)."""

    blobs: BlobStore
    workspace: Path

    async def keep(self, data: bytes, *, media_type: str, name: str) -> Attachment:
        return await self.blobs.put(data, media_type=media_type, name=name)

    async def to_inbox(self, name: str, source: Path) -> str:
        save = functools.partial(save_to_workspace, self.workspace, name, source)
        return await anyio.to_thread.run_sync(functools.partial(save, today=date.today()))


def tool_files(config: Config) -> ToolFiles:
    """The blob store and the agent's workspace, for the tools' files."""
    return ToolFiles(blobs=blob_store(config), workspace=Path(config.agent.workspace).expanduser())


def blob_store(config: Config) -> BlobStore:
    """Where attachments' bytes are kept (`state.media_dir`)."""
    return BlobStore(folder=config.state.media_folder())


def media_intake(config: Config, *, transcribing: bool = True) -> MediaIntake:
    """Where inbound files go: the blob store, the workspace's inbox/, the limits, and the
    transcriber (unless not `transcribing`: a command that only sends files)."""
    from rousseau.media import MediaLimits

    t = config.media.transcription
    transcriber = None
    if t is not None and transcribing:
        from rousseau.media.transcribe import Transcriber

        key = t.api_key.get_secret_value() if t.api_key is not None else None
        transcriber = Transcriber(
            base_url=t.base_url, api_key=key, model=t.model, timeout=t.timeout
        )
    return MediaIntake(
        blobs=blob_store(config),
        workspace=Path(config.agent.workspace).expanduser(),
        limits=MediaLimits(max_bytes=config.media.max_bytes, types=tuple(config.media.types)),
        transcriber=transcriber,
    )


@asynccontextmanager
async def connected_agent(
    config: Config,
    provider: Provider,
    backend: Backend,
    *,
    ask: AskFn | None = None,
    name: str = DEFAULT_AGENT,
) -> AsyncIterator[Agent]:
    """`build_agent` on `backend`, with the configured MCP servers' tools connected (and,
    with `embeddings`, recall by meaning) while it is in use."""
    from rousseau.assembly.models import agent_models, build_meter
    from rousseau.mcp.client import mcp_tools

    registry = build_registry(config, name)
    hybrid = await hybrid_recall(config, backend)
    meter = build_meter(config, backend.spending) if backend.spending is not None else None
    models = agent_models(config.for_agent(name), provider, provider.name, agent=name, meter=meter)
    try:
        async with mcp_tools(config.mcp_servers, registry):
            yield build_agent(
                config,
                models.turn,
                backend.store,
                ask=ask,
                registry=registry,
                name=name,
                profiles=backend.profiles,
                meaning=hybrid[0] if hybrid is not None else None,
                compaction=models.compaction,
            )
    finally:
        with anyio.CancelScope(shield=True):
            await close_tools([registry])
            if hybrid is not None:
                await hybrid[0].embeddings.aclose()
