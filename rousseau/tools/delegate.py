"""The delegate tool (DESIGN.md section 9): a turn hands a task to another agent, or to a
fresh sub-agent with some of its own tools, and gets its final answer back.

Each child works in a session of its own (kept, with its parent's id), runs in its parent's
task (so /stop, a turn's deadline and the daemon's stop end the whole tree, and its model
calls are charged where its parent's are: rousseau.costs), and shows its steps in its
parent's preview. Delegate calls of one reply run side by side (`parallel`), at most
`max_children` of a turn at once, nested at most `max_depth` deep.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import structlog

from rousseau.agent import (
    Agent,
    Message,
    RousseauError,
    Session,
    StreamEvent,
    StreamEventKind,
    ToolCall,
    ToolNotFoundError,
    ToolOutput,
)
from rousseau.agent.types import ToolDefinition
from rousseau.messages import current_inbound, turn_status
from rousseau.tools.base import Tool

if TYPE_CHECKING:
    from rousseau.agent import Provider, ToolBox, ToolHandler
    from rousseau.state import SessionStore

log = structlog.get_logger("rousseau.tools")

SUB_AGENT_PROMPT = (
    "You are a sub-agent: another agent handed you one task. Do it with your tools and answer"
    " with the result alone, complete and self-contained: nobody will see this conversation"
    " or answer questions from you."
)
_depth: ContextVar[int] = ContextVar("delegation_depth", default=0)
"""How many delegations deep the running turn is (0: a turn of its own)."""


@dataclass(kw_only=True, slots=True)
class Delegation:
    """What a DelegateTool hands tasks to, bound once every agent is built."""

    caller: Agent
    """The agent whose tool it is: a fresh sub-agent gets some of its tools and approver."""
    agents: Mapping[str, Agent] = field(default_factory=dict)
    """The agents of `delegation.agents`, by name."""
    provider: Provider | None = None
    """The model of fresh sub-agents (agent.models.delegation); None: the caller's."""


class DelegateTool(Tool):
    name: ClassVar[str] = "delegate"
    parallel: ClassVar[bool] = True
    """Several delegate calls of one reply run side by side (see the agent loop)."""
    description: ClassVar[str] = (
        "Hand a task to a helper and get its final answer: another agent (`agent`) or, without"
        " one, a fresh sub-agent with some of your tools (`tools`, default all). It sees none"
        " of this conversation: give the task everything it needs. Several delegate calls in"
        " one reply run side by side."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "description": "What to do, fully."},
            "agent": {"type": "string", "description": "An agent to hand it to."},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "uniqueItems": True,
                "description": "The tools the helper may use: some of yours.",
            },
        },
        "required": ["task"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        *,
        agent: str,
        store: SessionStore | None,
        agents: list[str],
        max_children: int = 4,
        max_depth: int = 2,
    ) -> None:
        self.agent = agent
        self.store = store
        self.allowed = list(agents)
        self.max_children = max_children
        self.max_depth = max_depth
        self.delegation: Delegation | None = None
        """Set by `bind` once the agents exist."""
        self._slots: dict[str, tuple[anyio.CapacityLimiter, list[int]]] = {}
        """Per delegating session (one turn at a time): its children's places, and how many
        calls hold or wait for one."""

    def bind(self, delegation: Delegation) -> None:
        self.delegation = delegation

    def definition(self) -> ToolDefinition:
        found = super().definition()
        if not self.allowed:
            return found
        names = ", ".join(self.allowed)
        return replace(found, description=f"{found.description} Agents: {names}.")

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        delegation = self.delegation
        if delegation is None:
            return ToolOutput(content="delegation is not ready yet", is_error=True)
        depth = _depth.get()
        if depth >= self.max_depth:
            return ToolOutput(
                content=f"cannot delegate further: sub-agents nest at most {self.max_depth} deep"
                " (delegation.max_depth); do this task yourself",
                is_error=True,
            )
        child = self._child(delegation, input.get("agent"), input.get("tools"), depth)
        if isinstance(child, str):
            return ToolOutput(content=child, is_error=True)
        label, agent = child
        with self._place(call.session_id) as place:
            async with place:
                return await self._run(label, agent, input["task"], call, depth)

    def _child(
        self, delegation: Delegation, name: str | None, tools: list[str] | None, depth: int
    ) -> tuple[str, Agent] | str:
        """The child's label and agent, or why there is none (the model reads it)."""
        caller = delegation.caller
        mine = _names(caller.tools)
        wanted = set(tools) if tools is not None else None
        if wanted is not None and (unknown := sorted(wanted - mine)):
            return f"not your tools: {', '.join(unknown)} (yours: {', '.join(sorted(mine))})"
        if depth + 1 >= self.max_depth:
            mine.discard(self.name)  # the child would be refused anyway: not offered
        if name is not None:
            if name not in self.allowed or name not in delegation.agents:
                allowed = ", ".join(self.allowed) or "none"
                return f"agent {name!r} is not one to delegate to (delegation.agents: {allowed})"
            named = delegation.agents[name]
            theirs = _names(named.tools)
            if depth + 1 >= self.max_depth:
                theirs.discard(self.name)
            keep = theirs if wanted is None else theirs & wanted
            return name, Agent(named.provider, _Only(named.tools, keep), named.options)
        options = replace(
            caller.options,
            system_prompt=SUB_AGENT_PROMPT,
            recall=None,
            profile=None,
            skills=None,
        )
        provider = delegation.provider or caller.provider
        keep = mine if wanted is None else wanted & mine
        return "sub-agent", Agent(provider, _Only(caller.tools, keep), options)

    def _place(self, session_id: str) -> _Place:
        return _Place(self._slots, session_id, self.max_children)

    async def _run(
        self, label: str, agent: Agent, task: str, call: ToolCall, depth: int
    ) -> ToolOutput:
        session_id = f"{call.session_id}-{secrets.token_hex(3)}"
        session = Session(id=session_id)
        if self.store is not None:
            await self.store.create_session(session_id, title=f"{label}: {task[:60]}")
            owner, chat = _scope()
            name = self.agent if label == "sub-agent" else label
            await self.store.set_scope(
                session_id, owner=owner, chat=chat, agent=name, parent=call.session_id
            )
        status = turn_status.get()

        def show(event: StreamEvent) -> None:
            if status is not None and event.kind is StreamEventKind.TOOL_CALL and event.tool_use:
                status(f"↳ {label}: {event.tool_use.name}…")

        if status is not None:
            status(f"↳ {label}: working on it…")
        token = _depth.set(depth + 1)
        log.info("tools.delegated", to=label, session=session_id, depth=depth + 1)
        try:
            await agent.append(session, Message.user(task))
            unattended = bool(call.meta.get("unattended"))
            response = await agent.turn(session, unattended=unattended, on_event=show)
        except RousseauError as exc:
            log.warning("tools.delegate_failed", to=label, error=str(exc))
            return ToolOutput(content=f"the {label} failed: {exc}", is_error=True)
        finally:
            _depth.reset(token)
        answer = response.message.text.strip() or "(the helper gave no answer)"
        return ToolOutput(content=f"[{label}, session {session_id}]\n{answer}")


class _Place:
    """A child's place among its turn's: entered, it holds (or waits for) one of
    `max_children`; the turn's limiter is dropped when its last child is done."""

    def __init__(
        self,
        slots: dict[str, tuple[anyio.CapacityLimiter, list[int]]],
        session_id: str,
        max_children: int,
    ) -> None:
        self._slots = slots
        self._key = session_id
        if session_id not in slots:
            slots[session_id] = (anyio.CapacityLimiter(max_children), [0])
        self.limiter, self._count = slots[session_id]

    def __enter__(self) -> anyio.CapacityLimiter:
        self._count[0] += 1
        return self.limiter

    def __exit__(self, *exc: object) -> None:
        self._count[0] -= 1
        if not self._count[0]:
            self._slots.pop(self._key, None)


def _names(box: ToolBox | None) -> set[str]:
    return {d.name for d in box.definitions()} if box is not None else set()


def _scope() -> tuple[str | None, str | None]:
    """The owner and chat of the turn that delegates (as the router scopes its session), so
    the child's recall searches what its parent's would."""
    inbound = current_inbound.get()
    if inbound is None:
        return None, None
    chat = f"{inbound.transport}:{inbound.chat_id}"
    return (chat if inbound.is_group else f"{inbound.transport}:{inbound.sender_id}"), chat


class _Only:
    """The tools of a toolbox named in `names`, as a child sees them."""

    def __init__(self, box: ToolBox | None, names: set[str]) -> None:
        self._box = box
        self._names = frozenset(names)

    def get(self, name: str) -> ToolHandler:
        if self._box is None or name not in self._names:
            raise ToolNotFoundError(name)
        return self._box.get(name)

    def definitions(self) -> list[ToolDefinition]:
        if self._box is None:
            return []
        return [d for d in self._box.definitions() if d.name in self._names]


__all__ = ["SUB_AGENT_PROMPT", "DelegateTool", "Delegation"]
