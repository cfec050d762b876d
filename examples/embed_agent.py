"""The agent in your own program: read and grep tools, a pattern approver, a store, a turn.

Runs as it is with the scripted provider that ships for tests; swap in a real one:

    from rousseau.providers.anthropic import AnthropicProvider
    provider = AnthropicProvider(api_key=os.environ["ANTHROPIC_API_KEY"], model="claude-sonnet-4-5")
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from rousseau.agent import Agent, Message, Options, PatternApprover, PatternRule, StreamEventKind
from rousseau.agent.testing import ScriptedProvider, tool_reply
from rousseau.log import configure_logging
from rousseau.state import Store
from rousseau.tools import GrepTool, ReadTool, Registry, Workspace


async def main() -> None:
    configure_logging("warning")  # only warnings and errors from rousseau itself
    workspace = Path(tempfile.mkdtemp())
    (workspace / "todo.md").write_text("- water the plants\n- call Ada\n")

    provider = ScriptedProvider(
        tool_reply("read", path="todo.md"),
        "You have two things to do: water the plants and call Ada.",
    )
    store = Store(workspace / "sessions.db")
    folder = Workspace(workspace)  # the tools cannot reach outside it
    agent = Agent(
        provider,
        Registry([ReadTool(folder), GrepTool(folder)]),
        Options(
            system_prompt="You are a helpful assistant.",
            approver=PatternApprover(allow=[PatternRule(tool="read"), PatternRule(tool="grep")]),
            history=store,
        ),
    )

    session = await store.create_session()
    await agent.append(session, Message.user("What is on my list?"))
    async for event in agent.turn_stream(session):
        if event.kind is StreamEventKind.TEXT:
            print(event.text, end="", flush=True)
        elif event.kind is StreamEventKind.TOOL_CALL and event.tool_use:
            print(f"[{event.tool_use.name} {event.tool_use.input}]")
    print()
    store.close()


if __name__ == "__main__":
    anyio.run(main)
