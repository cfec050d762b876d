"""The conformance suite, run for every adapter through its own wire-level fake."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from tests.helpers import serving
from tests.transports.conformance import Delivered, Harness, MentionsAfterText

pytestmark = pytest.mark.anyio

FENCE = re.compile(r"^(```|~~~)", re.M)


async def echo(request: Request) -> Response:
    question = request.messages[-1].text
    if "slow" in question:
        await anyio.sleep(1.5)
    if "long" in question:
        code = "\n".join(f"line_{i} = {i}" for i in range(300))
        words = " ".join(f"w{i}" for i in range(3000))
        return text_reply(f"{words}\n\n```python\n{code}\n```\n\nDone.")
    return text_reply("echo: " + question)


@asynccontextmanager
async def daemon(harness: Harness, tmp: Path) -> AsyncIterator[tuple[Daemon, FunctionProvider]]:
    config = load_config(
        None,
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        },
    )
    provider = FunctionProvider(echo)
    transport = harness.transport()
    async with serving(transport, config, provider, [harness.owner]) as d:
        yield d, provider
    assert not transport.connected


async def act(action: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Drive the platform from a worker thread, as the platform itself is outside our loop;
    a harness may block there (waiting for a link to come back) without stalling the daemon."""
    await anyio.to_thread.run_sync(functools.partial(action, *args, **kwargs))


async def delivered(harness: Harness, count: int) -> list[Delivered]:
    with anyio.fail_after(20):
        while len(harness.delivered()) < count:
            await anyio.sleep(0.02)
    return harness.delivered()


async def settle() -> None:
    await anyio.sleep(0.5)  # time for anything wrong (an extra reply) to show up


async def test_reply_reaches_the_chat(harness: Harness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path):
        await act(harness.dm, "hello")
        [reply] = await delivered(harness, 1)
    assert reply.chat == harness.dm_chat and reply.text == "echo: hello"


async def test_stranger_is_ignored_without_a_model_call(harness: Harness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.dm, "let me in", sender=harness.stranger)
        await act(harness.dm, "hi")
        await delivered(harness, 1)
        await settle()
    assert [d.chat for d in harness.delivered()] == [harness.dm_chat]
    assert len(provider.requests) == 1


async def test_group_needs_a_mention(harness: Harness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.group, "chatter", mentioned=False)
        await act(harness.group, "a question", mentioned=True)
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.chat == harness.group_chat and "a question" in reply.text
    assert len(harness.delivered()) == 1 and len(provider.requests) == 1


async def test_an_emoji_before_the_mention_is_still_a_mention(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "mention_after"):
        pytest.skip(
            getattr(
                harness,
                "no_mention_after",
                f"the {harness.name} harness cannot put text before a mention",
            )
        )
    async with daemon(harness, tmp_path) as (_, provider):
        await act(cast(MentionsAfterText, harness).mention_after, "🎉 ", "a question")
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.chat == harness.group_chat
    assert "🎉" in reply.text and "a question" in reply.text
    assert len(harness.delivered()) == 1 and len(provider.requests) == 1


async def test_long_reply_is_split_with_nothing_lost(harness: Harness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path):
        await act(harness.dm, "say something long")
        await delivered(harness, getattr(harness, "long_parts", 2))
        await settle()
    parts = [d.text for d in harness.delivered()]
    assert all(harness.measure(p) <= harness.limit for p in parts)
    words = [
        w for p in parts for line in p.split("\n") if not FENCE.match(line) for w in line.split()
    ]
    assert words[:3000] == [f"w{i}" for i in range(3000)]
    assert words[-1] == "Done." and len(words) == 3000 + 300 * 3 + 1
    if getattr(harness, "delivers_lines", False):  # a line-based platform: one line each
        assert len(FENCE.findall("\n".join(parts))) % 2 == 0
    else:
        assert all(len(FENCE.findall(p)) % 2 == 0 for p in parts)


def can(harness: Harness, action: str) -> None:
    """Skip, before any daemon starts, where the harness cannot do `action` (a skip raised
    inside the daemon's task group arrives wrapped in an exception group)."""
    reason = getattr(harness, "cannot", {}).get(action)
    if reason:
        pytest.skip(reason)


async def test_duplicate_delivery_is_answered_once(harness: Harness, tmp_path: Path) -> None:
    can(harness, "redeliver_last")
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.dm, "once only")
        await act(harness.redeliver_last)
        await delivered(harness, 1)
        await settle()
    assert len(harness.delivered()) == 1 and len(provider.requests) == 1


async def test_own_messages_are_ignored(harness: Harness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.own_message, "echo: something I said")
        await act(harness.dm, "hi")
        await delivered(harness, 1)
        await settle()
    assert len(provider.requests) == 1


async def test_survives_a_dropped_connection(harness: Harness, tmp_path: Path) -> None:
    can(harness, "drop_connection")
    async with daemon(harness, tmp_path):
        await act(harness.drop_connection)
        await anyio.sleep(0.2)
        await act(harness.dm, "are you still there?")
        [reply] = await delivered(harness, 1)
    assert reply.text == "echo: are you still there?"


async def test_stops_cleanly(harness: Harness, tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with daemon(harness, tmp_path):
            await act(harness.dm, "hi")
            await delivered(harness, 1)
    events = [e["event"] for e in logs]
    assert events.index("daemon.stopping") < events.index("daemon.stopped")
    assert not [e for e in logs if e.get("log_level") == "error"]


async def test_typing_is_shown_while_a_slow_reply_is_written(
    harness: Harness, tmp_path: Path
) -> None:
    if not hasattr(harness, "typing_shown"):
        pytest.skip(
            getattr(harness, "no_typing", f"the {harness.name} harness cannot observe typing")
        )
    async with daemon(harness, tmp_path):
        await act(harness.dm, "slow one please")
        await delivered(harness, 1)
    assert harness.typing_shown()  # type: ignore[attr-defined]
