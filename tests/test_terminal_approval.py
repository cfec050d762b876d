"""The terminal's y/N prompt hides nothing: a padded or multi-line command is shown whole."""

from __future__ import annotations

import io

import pytest

from rousseau.agent import ApprovalRequest, ToolUse
from rousseau.cli.terminal import Painter, Screen, TerminalApproval

pytestmark = pytest.mark.anyio


class Answer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[str] = []

    async def read(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.text


async def ask(command: str) -> tuple[str, list[str]]:
    info = io.StringIO()
    screen = Screen(out=io.StringIO(), info=info, paint=Painter(False))
    reader = Answer("n")
    use = ToolUse(id="t1", name="bash", input={"command": command})
    approval = TerminalApproval(reader, screen)  # type: ignore[arg-type]
    assert await approval(ApprovalRequest(session_id="s", tool_use=use)) is False
    return info.getvalue(), reader.prompts


@pytest.mark.parametrize(
    "command",
    ["echo hello" + " " * 420 + "; rm -f victim", "echo hi\nrm -f victim", "echo \u202e hi"],
)
async def test_what_would_run_is_shown_whole(command: str) -> None:
    shown, prompts = await ask(command)
    if "\u202e" in command:
        assert "U+202E" in shown and "\u202e" not in shown + "".join(prompts)
    else:
        assert "rm -f victim" in shown
    assert prompts == ["  allow bash? [y/N] "]


async def test_a_short_plain_command_keeps_the_one_line_prompt() -> None:
    shown, prompts = await ask("ls -la")
    assert shown == "" and prompts == ["  allow bash ls -la? [y/N] "]
