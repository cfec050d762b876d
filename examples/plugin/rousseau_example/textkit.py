"""The textkit tools: `count_words`, configured by the `textkit:` section."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from rousseau.agent import ToolCall, ToolOutput
from rousseau.plugins import PluginSection, ToolContext, ToolPlugin
from rousseau.tools import Tool


class TextkitConfig(PluginSection):
    unit: Literal["words", "characters"] = "words"
    """What count_words counts."""


class CountWords(Tool):
    name: ClassVar[str] = "count_words"
    description: ClassVar[str] = "Count the words (or characters) of a text."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to count."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self, unit: str) -> None:
        self.unit = unit

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        text = input["text"]
        count = len(text.split()) if self.unit == "words" else len(text)
        return ToolOutput(content=f"{count} {self.unit}")


def build(section: TextkitConfig, context: ToolContext) -> list[Tool]:
    return [CountWords(section.unit)]


plugin = ToolPlugin(config=TextkitConfig, build=build)
