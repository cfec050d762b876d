"""A tool of your own: a strict JSON schema, checked before `execute` ever runs.

The scripted model first gets the input wrong (and reads why), then right.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from rousseau.agent import (
    Agent,
    Message,
    Options,
    PatternApprover,
    PatternRule,
    Session,
    StreamEventKind,
    ToolCall,
    ToolOutput,
)
from rousseau.agent.testing import ScriptedProvider, tool_reply
from rousseau.log import configure_logging
from rousseau.tools import Registry, Tool

FACTORS = {"km": 1000.0, "mi": 1609.344, "m": 1.0}


class ConvertDistance(Tool):
    name = "convert_distance"
    description = "Convert a distance between kilometres (km), miles (mi) and metres (m)."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "value": {"type": "number", "minimum": 0},
            "from": {"enum": list(FACTORS)},
            "to": {"enum": list(FACTORS)},
        },
        "required": ["value", "from", "to"],
        "additionalProperties": False,
    }

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        metres = input["value"] * FACTORS[input["from"]]
        return ToolOutput(content=f"{metres / FACTORS[input['to']]:.2f} {input['to']}")


async def main() -> None:
    configure_logging("warning")  # only warnings and errors from rousseau itself
    provider = ScriptedProvider(
        tool_reply("convert_distance", value=42.195, unit="km"),  # wrong: no from/to
        tool_reply("convert_distance", value=42.195, **{"from": "km", "to": "mi"}),
        "A marathon is about 26.22 miles.",
    )
    agent = Agent(
        provider,
        Registry([ConvertDistance()]),
        Options(approver=PatternApprover(allow=[PatternRule(tool="convert_distance")])),
    )
    session = Session(id="example")
    await agent.append(session, Message.user("How far is a marathon in miles?"))
    async for event in agent.turn_stream(session):
        if event.kind is StreamEventKind.TOOL_RESULT and event.tool_result:
            print(f"[tool] {event.tool_result.content}")
        elif event.kind is StreamEventKind.TEXT:
            print(event.text, end="", flush=True)
    print()


if __name__ == "__main__":
    anyio.run(main)
