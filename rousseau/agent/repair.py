"""Make a history the APIs accept: every tool call answered, every result answering a call.

A crash between a tool call and its result, or an old store, can leave a call dangling; the
providers then reject every later request (HTTP 400). Repairing in memory before each turn
keeps the session usable and loses nothing the user said.
"""

from __future__ import annotations

from rousseau.agent.types import Content, Message, Role, ToolResult

INTERRUPTED = "not run: the turn was interrupted before this call finished"


def repair_history(messages: list[Message], *, start: int = 0) -> int:
    """Close dangling tool calls and drop orphaned results, in place; return the fixes made.
    Messages before `start` are taken as valid (checked before, and unchanged since)."""
    fixes = 0
    i = start
    while i < len(messages):
        message = messages[i]
        following = messages[i + 1] if i + 1 < len(messages) else None
        if message.role is Role.ASSISTANT:
            uses = message.tool_uses
            answered = (
                {r.tool_use_id for r in following.tool_results}
                if following is not None and following.role is Role.USER
                else set()
            )
            missing = [
                Content.of_tool_result(
                    ToolResult(tool_use_id=u.id, content=INTERRUPTED, is_error=True)
                )
                for u in uses
                if u.id not in answered
            ]
            if missing and following is not None and following.role is Role.USER:
                following.content[:0] = missing
            elif missing:
                messages.insert(i + 1, Message(role=Role.USER, content=missing))
            fixes += len(missing)
        elif message.tool_results:
            previous = messages[i - 1] if i > 0 else None
            asked = (
                {u.id for u in previous.tool_uses}
                if previous is not None and previous.role is Role.ASSISTANT
                else set()
            )
            kept = [
                c
                for c in message.content
                if c.tool_result is None or c.tool_result.tool_use_id in asked
            ]
            if len(kept) != len(message.content):
                fixes += len(message.content) - len(kept)
                message.content = kept or [Content.of_text("(tool results omitted)")]
        i += 1
    return fixes
