"""Ask-mode approval in chat, through the real Telegram adapter and a fake Bot API: owners
answer `yes ID` / `no ID`; silence denies; every case lands in the audit trail."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.state import Store
from tests.helpers import serving
from tests.transports.harness_telegram import TelegramHarness

pytestmark = pytest.mark.anyio
CODE = re.compile(r"Approve bash\? \[([A-Z0-9]{4})\]")


def model(request: Request) -> Response:
    last = request.messages[-1]
    if last.tool_results:
        result = last.tool_results[0]
        return text_reply(("refused: " if result.is_error else "ran: ") + result.content.strip())
    if last.text.startswith("run "):
        return tool_reply("bash", command=f"echo {last.text[4:]}")
    return text_reply(f"plain answer to {last.text}")


@pytest.fixture
def telegram() -> Iterator[TelegramHarness]:
    harness = TelegramHarness()
    yield harness
    harness.close()


@asynccontextmanager
async def daemon(
    telegram: TelegramHarness, tmp: Path, *, owners: str = "", wait: str = "30s", **extra: str
) -> AsyncIterator[Daemon]:
    env = {
        **extra,
        "HOME": str(tmp),
        "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
        "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        "ROUSSEAU_AGENT_APPROVER_MODE": "ask",
        "ROUSSEAU_AGENT_APPROVER_APPROVAL_TIMEOUT": wait,
    }
    if owners:
        env["ROUSSEAU_AGENT_APPROVER_OWNERS"] = owners
    config = load_config(None, env)
    provider = FunctionProvider(model)
    async with serving(telegram.transport(), config, provider, ["42", "43", "44"]) as made:
        yield made


def say(telegram: TelegramHarness, user: int, text: str) -> None:
    telegram.fake.push(text, chat_id=user, user_id=user)


async def said(telegram: TelegramHarness, chat: int, pattern: str) -> str:
    """Wait for a message to `chat` matching `pattern`; return it."""
    with anyio.fail_after(20):
        while True:
            for sent in telegram.fake.sent:  # as sent, and as shown after an edit
                for text in (sent.text, sent.shown):
                    if sent.chat_id == chat and re.search(pattern, text):
                        return text
            await anyio.sleep(0.02)


async def code_for(telegram: TelegramHarness, chat: int, seen: set[str] | None = None) -> str:
    with anyio.fail_after(20):
        while True:
            for sent in telegram.fake.sent:
                found = CODE.search(sent.text)
                if sent.chat_id == chat and found and found.group(1) not in (seen or set()):
                    return found.group(1)
            await anyio.sleep(0.02)


def audit(tmp: Path) -> list[tuple[str, str, str]]:
    with Store(tmp / "s.db") as store:
        return [(c.decision, c.decided_by, c.outcome) for c in reversed(store.tool_calls_sync())]


async def test_yes_runs_it_and_no_denies_it(telegram: TelegramHarness, tmp_path: Path) -> None:
    async with daemon(telegram, tmp_path):
        say(telegram, 42, "run hello")
        code = await code_for(telegram, 42)
        say(telegram, 42, f"yes {code}")
        assert await said(telegram, 42, f"Approved {code}")
        assert await said(telegram, 42, "^ran: hello$")

        say(telegram, 42, "run goodbye")
        second = await code_for(telegram, 42, {code})
        say(telegram, 42, f"no {second}")
        assert await said(telegram, 42, "^refused: denied: telegram:42 said no$")
    assert audit(tmp_path) == [
        ("allow", "owner telegram:42", "ok"),
        ("deny", "owner telegram:42", "denied"),
    ]


async def test_silence_denies(telegram: TelegramHarness, tmp_path: Path) -> None:
    async with daemon(telegram, tmp_path, wait="1s"):
        say(telegram, 42, "run later")
        code = await code_for(telegram, 42)
        assert await said(telegram, 42, "^refused: denied: no answer within 1 s$")
        say(telegram, 42, f"yes {code}")  # too late
        assert await said(telegram, 42, f"no approval {code} waiting")
    assert audit(tmp_path) == [("deny", "timeout: no answer", "denied")]


async def test_owners_settle_concurrent_requests_and_others_cannot(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    async with daemon(telegram, tmp_path, owners="telegram:42"):
        say(telegram, 43, "run first")
        say(telegram, 44, "run second")
        first = await code_for(telegram, 43)
        second = await code_for(telegram, 44)
        assert first != second
        # both requests reached the owner too (each chat is delivered to on its own)
        assert await code_for(telegram, 42, {second}) == first
        assert await code_for(telegram, 42, {first}) == second
        say(telegram, 43, f"yes {first}")  # 43 is allowed to chat, not to approve
        assert await said(telegram, 43, f"Only an owner can answer {first}")
        say(telegram, 42, f"no {second}")
        say(telegram, 42, f"yes {first}")
        assert await said(telegram, 43, "^ran: first$")
        assert await said(telegram, 44, "^refused: denied: telegram:42 said no$")
    assert sorted(audit(tmp_path)) == [
        ("allow", "owner telegram:42", "ok"),
        ("deny", "owner telegram:42", "denied"),
    ]


async def test_other_messages_are_answered_not_swallowed(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    async with daemon(telegram, tmp_path):
        say(telegram, 42, "run slowly")
        code = await code_for(telegram, 42)
        say(telegram, 43, "what is the weather")  # another chat: answered at once
        assert await said(telegram, 43, "^plain answer to what is the weather$")
        say(telegram, 42, "and meanwhile?")  # the same chat: kept, answered after the turn
        await anyio.sleep(0.3)
        assert not [s for s in telegram.fake.sent if "meanwhile" in s.text]
        say(telegram, 42, f"yes {code}")
        assert await said(telegram, 42, "^ran: slowly$")
        assert await said(telegram, 42, r"^plain answer to and meanwhile\?$")
    assert audit(tmp_path) == [("allow", "owner telegram:42", "ok")]


async def test_cron_turns_never_wait_to_ask(telegram: TelegramHarness, tmp_path: Path) -> None:
    from rousseau.cron import CronJobs
    from rousseau.state.sqlite_cron import SqliteCronJobs

    with Store(tmp_path / "s.db") as store:
        await CronJobs(SqliteCronJobs(store)).add(
            "nightly", "@every 1s", "run backup", "telegram:42", timezone="UTC"
        )
    async with daemon(telegram, tmp_path, ROUSSEAU_CRON_POLL_INTERVAL="0.2"):
        text = await said(telegram, 42, "^refused: ")
    assert text == "refused: denied: no one is present to approve this tool call"
    assert not [s for s in telegram.fake.sent if CODE.search(s.text)]  # nobody was asked
    assert audit(tmp_path)[0] == ("deny", "unattended: nobody to ask", "denied")


async def test_cron_may_have_its_own_approver(telegram: TelegramHarness, tmp_path: Path) -> None:
    from rousseau.cron import CronJobs
    from rousseau.state.sqlite_cron import SqliteCronJobs

    with Store(tmp_path / "s.db") as store:
        await CronJobs(SqliteCronJobs(store)).add(
            "nightly", "@every 1s", "run backup", "telegram:42", timezone="UTC"
        )
    config = tmp_path / "config.yaml"
    config.write_text("cron:\n  approver: {mode: pattern, allow: [{tool: bash, match: echo}]}\n")
    async with daemon(
        telegram, tmp_path, ROUSSEAU_CRON_POLL_INTERVAL="0.2", ROUSSEAU_CONFIG=str(config)
    ):
        assert await said(telegram, 42, "^ran: backup$")
    assert audit(tmp_path)[0][:2] == ("allow", "rule: allow bash 'echo'")


async def test_telegram_buttons_answer_too(telegram: TelegramHarness, tmp_path: Path) -> None:
    async with daemon(telegram, tmp_path, owners="telegram:42"):
        say(telegram, 43, "run pressed")
        code = await code_for(telegram, 42)
        [question] = [s for s in telegram.fake.sent if s.chat_id == 42 and code in s.text]
        buttons = question.params["reply_markup"]["inline_keyboard"][0]
        assert [b["text"] for b in buttons] == [f"yes {code}", f"no {code}"]
        telegram.fake.press(question, f"yes {code}", user_id=43)  # not an owner: refused
        assert await said(telegram, 42, f"Only an owner can answer {code}")
        telegram.fake.press(question, f"yes {code}", user_id=42)
        assert await said(telegram, 43, "^ran: pressed$")
        assert len(telegram.fake.answered) == 2  # each press's spinner was stopped
    assert audit(tmp_path) == [("allow", "owner telegram:42", "ok")]


async def test_only_codes_given_out_are_answers() -> None:
    from rousseau.agent import ApprovalRequest, ToolUse
    from rousseau.approvals import ChatApprovals

    asked: list[tuple[str, ...]] = []

    async def notify(transport: str, chat_id: str, text: str, buttons: tuple[str, ...] = ()) -> int:
        asked.append(buttons)
        return 1

    approvals = ChatApprovals(owners=["telegram:42"], timeout=0.05, notify=notify)
    assert not approvals.is_answer("no thanks") and not approvals.is_answer("yes ABCD")
    request = ApprovalRequest(session_id="s", tool_use=ToolUse(id="t", name="bash", input={}))
    decision = await approvals.ask(request)
    assert not decision.allow and decision.by == "timeout: no answer"
    code = asked[0][0].split()[1]
    assert approvals.is_answer(f"yes {code.lower()}")  # a late answer is still recognised
    assert not approvals.is_answer("no thanks")


async def test_a_turn_waiting_for_an_approval_says_so_where_its_reply_will_be(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    async with daemon(telegram, tmp_path):
        say(telegram, 42, "run hello")
        code = await code_for(telegram, 42)
        assert await said(telegram, 42, "waiting for an owner to approve")  # the preview
        say(telegram, 42, f"yes {code}")
        assert await said(telegram, 42, "^ran: hello$")  # the preview, edited into the answer
    assert "waiting for an owner to approve" not in " ".join(telegram.fake.visible(42))
