"""Replies streamed into the chats of the platforms whose adapters edit messages (Telegram,
Slack and Discord on their fakes, Matrix on the real Synapse): the answer grows in one
message, edited at most once a second, and ends as the model's answer exactly; an answer
longer than a message ends split as a whole reply would be; /stop cuts a running bash call.
The whole daemon's streaming (kill -9 on each, a Telegram 429) is in tests/test_streaming.py."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import ScriptedProvider, text_reply, tool_reply
from rousseau.config import Config, load_config
from rousseau.transports.split import split_message
from tests.helpers import runs_below, serving
from tests.transports.conformance import Harness
from tests.transports.test_conformance import act

pytestmark = pytest.mark.anyio

ANSWER = " ".join(f"word{i}" for i in range(120))


async def test_a_slow_answer_grows_in_one_message_that_ends_as_the_answer(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "shown"):
        pytest.skip(f"{harness.name}: its adapter sends replies whole (no message edits)")
    asked: list[float] = []

    def answer(request: Request) -> Response:
        asked.append(time.time())  # the first token follows at once
        return text_reply(ANSWER)

    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
        },
    )
    provider = ScriptedProvider(answer, chunk=24, pace=0.12)  # about 3.5 s of writing
    shown = harness.shown  # type: ignore[attr-defined]
    async with serving(harness.transport(), config, provider, [harness.owner]):
        await act(harness.dm, "tell me a long story")
        with anyio.fail_after(30):
            while await anyio.to_thread.run_sync(shown) != [ANSWER]:
                await anyio.sleep(0.2)
    # Stopped cleanly (what it had still to send went out first): nothing more came.
    assert await anyio.to_thread.run_sync(shown) == [ANSWER]
    times = await anyio.to_thread.run_sync(harness.update_times)  # type: ignore[attr-defined]
    assert len(times) >= 3  # shown while written, then the final edit
    assert times[0] - asked[0] >= 0.9  # not before a second of it was written
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # one update a second


async def test_a_slack_429_on_an_update_waits_as_told_and_loses_nothing(tmp_path: Path) -> None:
    from tests.transports.harness_slack import SlackHarness

    harness = SlackHarness()
    harness.fake.rate_limit_updates = 1  # Retry-After: 2
    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
        },
    )
    provider = ScriptedProvider(ANSWER, chunk=24, pace=0.15)
    try:
        async with serving(harness.transport(), config, provider, [harness.owner]):
            await act(harness.dm, "tell me a long story")
            with anyio.fail_after(30):
                while harness.shown() != [ANSWER]:
                    await anyio.sleep(0.2)
    finally:
        harness.close()
    assert harness.fake.rate_limit_updates == 0  # the 429 was given
    times = harness.update_times()
    assert max(b - a for a, b in itertools.pairwise(times)) >= 2.0  # and obeyed


def _config(tmp_path: Path, **agent: object) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"agent": {"workspace": str(tmp_path / "ws"), **agent}}))
    path.chmod(0o600)
    return load_config(path, {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")})


async def test_an_answer_longer_than_a_message_ends_split_with_nothing_lost(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "shown"):
        pytest.skip(f"{harness.name}: its adapter sends replies whole (no message edits)")
    words = itertools.count()
    answer = ""
    while harness.measure(answer) < harness.limit * 5 // 2:
        answer += f"word{next(words)} "
    answer = answer.strip()
    provider = ScriptedProvider(answer, chunk=len(answer) // 30 + 1, pace=0.12)
    shown = harness.shown  # type: ignore[attr-defined]
    expected = split_message(answer, harness.limit, harness.measure)
    assert len(expected) == 3
    async with serving(harness.transport(), _config(tmp_path), provider, [harness.owner]):
        await act(harness.dm, "tell me a very long story")
        with anyio.fail_after(40):
            while await anyio.to_thread.run_sync(shown) != expected:
                await anyio.sleep(0.2)
    # Stopped cleanly (what it had still to send went out first): nothing more came.
    assert await anyio.to_thread.run_sync(shown) == expected


async def test_stop_ends_a_long_bash_call_and_the_session_goes_on(
    harness: Harness, tmp_path: Path
) -> None:
    provider = ScriptedProvider(tool_reply("bash", command="sleep 30"), "hello to you")
    config = _config(tmp_path, approver={"allow": [{"tool": "bash"}]})

    def texts() -> list[str]:
        return [d.text for d in harness.delivered() if d.chat == harness.dm_chat]

    def previewing() -> bool:
        """The preview says bash runs (where the platform shows previews)."""
        return not hasattr(harness, "shown") or harness.shown() == ["⏳ running `sleep 30`…"]

    async def until(seen: Callable[[list[str]], bool]) -> None:
        with anyio.fail_after(20):
            while not seen(await anyio.to_thread.run_sync(texts)):
                await anyio.sleep(0.1)

    async with serving(harness.transport(), config, provider, [harness.owner]):
        await act(harness.dm, "please sleep")
        with anyio.fail_after(20):
            while not provider.requests:
                await anyio.sleep(0.1)
            while not runs_below(os.getpid(), "sleep", "30"):  # bash is sleeping
                await anyio.sleep(0.1)
            while not await anyio.to_thread.run_sync(previewing):  # and the preview says so
                await anyio.sleep(0.1)
        await act(harness.dm, "/stop")
        await until(lambda t: "Stopped." in t)
        with anyio.fail_after(10):  # the command was killed, not waited for
            while runs_below(os.getpid(), "sleep", "30"):
                await anyio.sleep(0.1)
        await act(harness.dm, "hello again")
        await until(lambda t: t[-1:] == ["hello to you"])
    if hasattr(harness, "shown"):  # the preview said what ran, and is left saying so
        assert (await anyio.to_thread.run_sync(harness.shown))[0] == "(stopped)"
        assert texts()[0] == "⏳ running `sleep 30`…"
    history = provider.requests[-1].messages
    assert history[-1].text == "hello again"
    calls = [u.id for m in history for u in m.tool_uses]
    assert [r.tool_use_id for m in history for r in m.tool_results] == calls  # closed
    assert len(calls) == 1 or harness.name == "email"  # a new mail is a new conversation


def _native_slack(tmp_path: Path) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "agent": {"workspace": str(tmp_path / "ws")},
                "state": {"path": str(tmp_path / "s.db")},
                "slack": {"streaming": "native"},
            }
        )
    )
    return load_config(str(path), {"HOME": str(tmp_path)})


async def test_slack_native_streams_grow_a_thread_reply_that_ends_as_the_answer(
    tmp_path: Path,
) -> None:
    from rousseau.transports.slack import SlackTransport
    from tests.transports.harness_slack import SlackHarness

    harness = SlackHarness()
    fake = harness.fake
    transport = SlackTransport(
        fake.app_token, fake.bot_token, base_url=fake.url + "/api/", native_streams=True
    )
    answer = "Here is **the** plan:\n\n" + ANSWER
    provider = ScriptedProvider(answer, chunk=24, pace=0.12)
    try:
        async with serving(transport, _native_slack(tmp_path), provider, [harness.owner]):
            asked = fake.mention("tell me a long story", user=harness.owner)
            with anyio.fail_after(30):
                while not any(p.thread_ts == asked["ts"] and p.shown.startswith("Here is *the*")
                              for p in fake.posted):  # fmt: skip
                    await anyio.sleep(0.2)
    finally:
        harness.close()
    [reply] = [p for p in fake.posted if p.thread_ts == asked["ts"]]
    methods = [m for m, ts in fake.stream_calls if ts == reply.ts]
    assert methods[0] == "chat.startStream" and methods[-1] == "chat.stopStream"
    assert methods.count("chat.appendStream") >= 2  # it grew by appends, a second apart
    assert not reply.streaming
    assert reply.shown == "Here is *the* plan:\n\n" + ANSWER  # the final update: mrkdwn


async def test_slack_native_streams_refused_fall_back_to_edits(tmp_path: Path) -> None:
    from rousseau.transports.slack import SlackTransport
    from tests.transports.harness_slack import SlackHarness

    harness = SlackHarness()
    fake = harness.fake
    fake.streams_refused = "not_allowed_token_type"
    transport = SlackTransport(
        fake.app_token, fake.bot_token, base_url=fake.url + "/api/", native_streams=True
    )
    provider = ScriptedProvider(ANSWER, chunk=24, pace=0.12)
    try:
        async with serving(transport, _native_slack(tmp_path), provider, [harness.owner]):
            asked = fake.mention("tell me a long story", user=harness.owner)
            with anyio.fail_after(30):
                while not any(p.thread_ts == asked["ts"] and p.shown == ANSWER
                              for p in fake.posted):  # fmt: skip
                    await anyio.sleep(0.2)
    finally:
        harness.close()
    [reply] = [p for p in fake.posted if p.thread_ts == asked["ts"]]
    assert len(reply.updated_at) >= 2  # shown while written, by edits
    assert fake.stream_calls == [] and transport.native_streams is False
