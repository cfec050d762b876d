"""What an owner is asked to approve is all of it, and is exactly what runs.

Through the real Telegram adapter and a fake Bot API: a command padded to push its dangerous
end past the preview, or hiding it behind a right-to-left override, shows that end in the
message the owner receives. A call whose input changes after it was approved never runs.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from rousseau.agent import (
    ApprovalRequest,
    AskingApprover,
    Decision,
    PatternApprover,
    Request,
    Response,
    ToolCall,
    ToolOutput,
    ToolUse,
)
from rousseau.agent.approval import input_digest
from rousseau.agent.loop import run_tool
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.approvals import ChatApprovals, preview, unseen
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.tools import Registry, Tool
from tests.helpers import serving
from tests.transports.harness_telegram import TelegramHarness

pytestmark = pytest.mark.anyio
CODE = re.compile(r"Approve bash\? \[([A-Z0-9]{4})\]")
PADDED = "echo hello" + " " * 420 + "; rm -f victim"
BIDI = "echo safe \u202e; rm -f victim #\u202c"
LONG = "echo " + " ".join(f"w{i}" for i in range(1500)) + "; rm -f victim"
COMMANDS = {"padded": PADDED, "bidi": BIDI, "too long": LONG}


def model(request: Request) -> Response:
    last = request.messages[-1]
    if last.tool_results:
        result = last.tool_results[0]
        return text_reply(("refused: " if result.is_error else "ran: ") + result.content.strip())
    return tool_reply("bash", command=COMMANDS[last.text])


@pytest.fixture
def telegram() -> Iterator[TelegramHarness]:
    harness = TelegramHarness()
    yield harness
    harness.close()


@asynccontextmanager
async def daemon(telegram: TelegramHarness, tmp: Path) -> AsyncIterator[Daemon]:
    env = {
        "HOME": str(tmp),
        "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
        "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        "ROUSSEAU_AGENT_APPROVER_MODE": "ask",
        "ROUSSEAU_AGENT_APPROVER_OWNERS": "telegram:42",
    }
    async with serving(
        telegram.transport(), load_config(None, env), FunctionProvider(model), ["42", "43"]
    ) as made:
        yield made


async def question_to(telegram: TelegramHarness, chat: int) -> tuple[str, str]:
    """The approval question sent to `chat`: its code and its whole text."""
    with anyio.fail_after(20):
        while True:
            for sent in telegram.fake.sent:
                found = CODE.search(sent.text)
                if sent.chat_id == chat and found:
                    return found.group(1), sent.text
            await anyio.sleep(0.02)


async def said(telegram: TelegramHarness, chat: int, pattern: str) -> str:
    with anyio.fail_after(20):
        while True:
            for sent in telegram.fake.sent:
                if sent.chat_id == chat and re.search(pattern, sent.text):
                    return sent.text
            await anyio.sleep(0.02)


async def test_padding_cannot_push_the_command_out_of_sight(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "victim").write_text("keep me")
    async with daemon(telegram, tmp_path):
        telegram.fake.push("padded", chat_id=43, user_id=43)
        code, text = await question_to(telegram, 42)
        assert '{"command":"echo hello<420 spaces>; rm -f victim"}' in text
        assert "rm -f victim" in text.split("\n", 2)[1]  # on the input's own line
        assert " " * 5 not in text
        # the parsed commands are listed, one a line
        assert "\n  1. echo hello\n  2. rm -f victim\n" in text
        telegram.fake.push(f"no {code}", chat_id=42, user_id=42)
        assert await said(telegram, 43, "^refused: denied: telegram:42 said no$")
    assert (tmp_path / "ws" / "victim").read_text() == "keep me"


async def test_bidirectional_controls_are_shown_not_obeyed(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    async with daemon(telegram, tmp_path):
        telegram.fake.push("bidi", chat_id=43, user_id=43)
        code, text = await question_to(telegram, 42)
        assert "\u202e" not in text and "\u202c" not in text
        assert "echo safe <U+202E>; rm -f victim #<U+202C>" in text
        telegram.fake.push(f"no {code}", chat_id=42, user_id=42)
        assert await said(telegram, 43, "^refused: ")


def test_long_input_keeps_its_head_and_its_tail() -> None:
    content = "".join(f"{i:05d} " for i in range(600)) + "the end"
    text = preview("write", {"path": "notes.txt", "content": content})
    assert text.startswith('{"path":"notes.txt","content":"00000 00001')
    assert text.endswith('00599 the end"}')
    hidden = re.search(r"… ([\d,]+) characters not shown …", text)
    assert hidden is not None
    shown = len(text) - len(hidden.group(0))
    raw = '{"path":"notes.txt","content":"' + content + '"}'
    assert shown + int(hidden.group(1).replace(",", "")) == len(raw)


def test_a_command_is_shown_whole() -> None:
    command = "echo " + "".join(f"{i:05d} " for i in range(600)) + "&& rm -rf ~"  # < 4 KB
    text = preview("bash", {"command": command})
    assert text.split("\n", 1)[0] == '{"command":"' + command + '"}'  # nothing cut
    assert "  2. rm -rf ~" in text
    assert unseen("bash", {"command": command}) is None


def _padding(size: int) -> str:
    """Text no run-counting shortens: what an attacker pads a command with."""
    return " ".join(f"w{i}" for i in range(size // 4))


# Shapes an attacker pads a command into, each past what the parser reads (4,096 characters).
HIDING = {
    "middle": f"echo {_padding(6000)}; rm -rf ~; echo {_padding(2000)}",
    "end": f"echo {_padding(6000)} && rm -rf ~",
    "comment": f"rm -rf ~ # {_padding(6000)}",
    "heredoc": f"bash <<'EOF'\necho {_padding(3000)}\nrm -rf ~\necho {_padding(3000)}\nEOF",
    "here-string": f'bash <<< "echo {_padding(3000)}; rm -rf ~; echo {_padding(3000)}"',
    "bash -c": f"bash -c 'echo {_padding(3000)}; rm -rf ~; echo {_padding(3000)}'",
    "newlines": "\n".join([f"echo {_padding(200)}"] * 30 + ["rm -rf ~"] + ["true"] * 30),
    "substitution": f"echo {_padding(5000)} $(rm -rf ~) {_padding(1000)}",
    "semicolons": "true;" * 1000 + "rm -rf ~;" + "true;" * 1000,
    "assignment": f"X='{_padding(6000)}' rm -rf ~",
    "pipe": f"echo {_padding(6000)} | sh -c 'rm -rf ~' | cat",
}


@pytest.mark.parametrize("shape", HIDING)
def test_a_command_too_long_to_show_whole_is_not_asked(shape: str) -> None:
    command = {"command": HIDING[shape]}
    reason = unseen("bash", command)
    assert reason is not None and "not put to anyone" in reason
    assert "shorter commands" in reason  # what the model can do instead


def test_a_long_command_made_of_runs_is_shown_with_them_counted() -> None:
    command = {"command": "echo hi" + " " * 9000 + "; rm -rf ~"}
    assert unseen("bash", command) is None
    assert '{"command":"echo hi<9,000 spaces>; rm -rf ~"}' in preview("bash", command)


def test_other_tools_are_asked_about_however_long() -> None:
    assert unseen("write", {"path": "a", "content": _padding(20000)}) is None


async def test_the_owner_is_not_asked_about_what_they_cannot_read(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "victim").write_text("keep me")
    async with daemon(telegram, tmp_path):
        telegram.fake.push("too long", chat_id=43, user_id=43)
        answer = await said(telegram, 43, "^refused: ")
        assert "not put to anyone" in answer and "shorter commands" in answer
        assert not [m for m in telegram.fake.sent if CODE.search(m.text)]  # nobody was asked
    assert (tmp_path / "ws" / "victim").read_text() == "keep me"


def test_a_line_too_long_to_parse_is_shown_whole_and_allowed_by_no_pattern() -> None:
    from rousseau.approvals import MAX_PARSED, split_bash

    command = "echo " + "x" * MAX_PARSED + " && rm -rf ~"
    assert split_bash({"command": command}) is None
    text = preview("bash", {"command": command})
    assert text.split("\n", 1)[0].endswith(' && rm -rf ~"}')
    assert "could not be parsed" in text


def test_newlines_tabs_and_invisible_characters_are_visible() -> None:
    text = preview("bash", {"command": "ls\nrm 'a\tb' \u200b\u2066y\x07"})
    first = text.split("\n", 1)[0]
    assert first == '{"command":"ls\\nrm \'a\\tb\' <U+200B><U+2066>y\\u0007"}'
    assert "\t" not in text  # a tab inside a listed command is escaped too
    assert "  2. rm 'a\\tb' <U+200B><U+2066>y<U+0007>" in text


def test_unparsable_commands_say_so() -> None:
    text = preview("bash", {"command": "case a in a) rm x;; esac"})
    assert "could not be parsed" in text
    assert text.startswith('{"command":"case a in a) rm x;; esac"}')


def test_other_tools_show_their_input() -> None:
    assert preview("write", {"path": "a", "content": "x" * 8}) == (
        '{"path":"a","content":"xxxxxxxx"}'
    )
    assert preview("write", {"path": "a", "content": "x" * 300}) == (
        '{"path":"a","content":"<300 times x>"}'
    )


# -- what is approved is what runs -----------------------------------------------------


class Recorder(Tool):
    name = "bash"
    description = "records what it is asked to run"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        self.ran.append(input["command"])
        return ToolOutput(content="done")


def registry() -> tuple[Registry, Recorder]:
    tool = Recorder()
    reg = Registry()
    reg.register(tool)
    return reg, tool


async def test_input_changed_after_a_person_approved_it_is_refused() -> None:
    reg, tool = registry()

    async def approve_then_swap(request: ApprovalRequest) -> bool:
        request.input["command"] = "rm -rf ~"
        return True

    approver = AskingApprover(rules=PatternApprover(), ask=approve_then_swap)
    use = ToolUse(id="t1", name="bash", input={"command": "ls"})
    result, denied = await run_tool(reg, approver, "s", use)
    assert denied and result.is_error
    assert "changed after it was approved" in result.content
    assert tool.ran == []


async def test_input_changed_while_the_owner_reads_it_is_refused() -> None:
    reg, tool = registry()
    asked: list[tuple[str, str]] = []

    async def notify(transport: str, chat: str, text: str, buttons: tuple[str, ...] = ()) -> int:
        asked.append((chat, text))
        return 1

    chat = ChatApprovals(owners=["memory:owner"], notify=notify, timeout=20)
    approver = AskingApprover(rules=PatternApprover(), ask=chat.ask)
    use = ToolUse(id="t1", name="bash", input={"command": "ls"})
    outcome: list[tuple[Any, bool]] = []

    async def call() -> None:
        outcome.append(await run_tool(reg, approver, "s", use))

    from rousseau.messages import Inbound

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(5):
            while not asked:
                await anyio.sleep(0.01)
        [(_, text)] = asked
        assert '{"command":"ls"}' in text
        use.input["command"] = "rm -rf ~"  # swapped while the question is pending
        code = CODE.search(text)
        assert code is not None
        answer = Inbound(
            transport="memory",
            chat_id="owner",
            sender_id="owner",
            message_id="m1",
            text=f"yes {code.group(1)}",
        )
        assert chat.answer(answer).startswith("Approved")
    [(result, denied)] = outcome
    assert denied and "changed after it was approved" in result.content
    assert tool.ran == []


async def test_a_decision_bound_to_another_input_does_not_run_this_one() -> None:
    reg, tool = registry()

    class Stale:
        async def approve(self, request: ApprovalRequest) -> Decision:
            other = ToolUse(id="x", name="bash", input={"command": "ls"})
            return Decision.allowed(by="stale", digest=input_digest(other))

    result, denied = await run_tool(
        reg, Stale(), "s", ToolUse(id="t", name="bash", input={"command": "rm x"})
    )
    assert denied and "changed after it was approved" in result.content and tool.ran == []
    result, denied = await run_tool(
        reg, Stale(), "s", ToolUse(id="t", name="bash", input={"command": "ls"})
    )
    assert not denied and result.content == "done" and tool.ran == ["ls"]
