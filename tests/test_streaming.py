"""Replies streamed into a chat through `rousseau run`: the OpenAI SDK reading a slowly
streamed answer from the fake model, python-telegram-bot sending and editing the preview on
the fake Bot API, which records every send and edit with its time; and a kill -9 mid-stream
on Slack and Discord (their fakes) and Matrix (the real Synapse) too."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rousseau.transports.split import split_message, utf16_len
from rousseau.transports.telegram import MAX_LENGTH
from tests.fakes.discord import OWNER_ID as DISCORD_OWNER
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import (
    FakeLLMServer,
    Recorded,
    Reply,
    openai_completion,
    openai_stream,
)
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram, Sent
from tests.faults.support import edit_config, wait_until
from tests.helpers import ROUSSEAU, runs_below  # noqa: F401 - the daemon fixtures run it
from tests.test_daemon import Daemon, daemon, llm, model  # noqa: F401 - fixtures
from tests.transports.harness_matrix import MatrixHarness

ANSWER = " ".join(f"word{i}" for i in range(120))
"""Streamed in 30 events 0.12 s apart: about 3.5 s of writing."""


def slowly(text: str = ANSWER, pace: float = 0.12, chunk: int = 24) -> Reply:
    reply = openai_stream(openai_completion(text), chunk=chunk)
    reply.pace = pace
    return reply


def preview_kept(running: Daemon) -> bool:
    """Whether the daemon has kept the id of a preview it showed (its restart then edits
    that message instead of answering in a new one)."""
    db = sqlite3.connect(running.config.parent / "state.db", timeout=5)
    try:
        [kept] = db.execute(
            "SELECT count(*) FROM inbox WHERE preview IS NOT NULL AND preview != '[]'"
        ).fetchone()
    finally:
        db.close()
    return bool(kept)


def updates(fake: FakeTelegram, chat: int = 42) -> list[float]:
    """When the chat's preview was sent or edited."""
    return sorted(
        [s.at for s in fake.sent if s.chat_id == chat]
        + [e.at for e in fake.edits if e.chat_id == chat]
    )


def test_a_slow_answer_grows_in_one_message_that_ends_as_the_answer(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    llm.responder = lambda r: slowly()
    daemon.start()
    telegram.push("tell me a long story")
    assert wait_until(lambda: telegram.visible(42) == [ANSWER], timeout=20)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert telegram.visible(42) == [ANSWER] and len(telegram.sent) == 1  # nothing more came
    [first_token] = llm.first_tokens
    times = updates(telegram)
    assert len(times) >= 3  # shown while written, then the final edit
    assert times[0] - first_token >= 0.9  # not before a second of it was written
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # one a second
    assert telegram.sent[0].text != ANSWER  # the first update was a part of it


def test_an_answer_longer_than_a_message_ends_split_with_nothing_lost(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    long = " ".join(f"w{i}" for i in range(1500))  # about 9,000 characters
    llm.responder = lambda r: slowly(long, pace=0.1, chunk=400)
    daemon.start()
    telegram.push("a very long one")
    whole = split_message(long, MAX_LENGTH, utf16_len)  # two messages, both edited
    assert wait_until(lambda: telegram.visible(42) == whole, timeout=30), telegram.visible(42)
    assert daemon.stop() == 0  # what it had still to send went out first
    shown = telegram.visible(42)
    assert shown == whole
    assert " ".join(shown).split() == long.split()


def test_a_429_on_an_edit_slows_the_edits_and_loses_nothing(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    llm.responder = lambda r: slowly(pace=0.15)
    telegram.flood_edits_once = 2
    daemon.start()
    telegram.push("tell me a long story")
    assert wait_until(lambda: telegram.visible(42) == [ANSWER], timeout=30)
    assert telegram.flood_edits_once is None  # the 429 was given
    times = updates(telegram)
    assert max(b - a for a, b in itertools.pairwise(times)) >= 2.0  # it waited
    assert daemon.stop() == 0


def test_a_kill_mid_stream_leaves_one_complete_answer_after_the_restart(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    llm.responder = lambda r: slowly(pace=0.3)  # about 9 s: killed well before the end
    daemon.start()
    telegram.push("tell me a long story")
    assert wait_until(lambda: len(telegram.sent) == 1, timeout=20)  # the preview is showing
    assert wait_until(lambda: preview_kept(daemon), timeout=10)  # and its id is kept
    daemon.stop(signal.SIGKILL)
    assert telegram.visible(42)[0] != ANSWER
    llm.responder = lambda r: slowly(pace=0.05)
    daemon.start()
    assert wait_until(lambda: telegram.visible(42) == [ANSWER], timeout=30), telegram.sent
    assert daemon.stop() == 0  # what it had still to send went out first
    assert telegram.visible(42) == [ANSWER], daemon.log.read_text()[-3000:]  # one message


def test_a_kill_before_a_previews_id_is_kept_leaves_it_and_answers_once_after_it(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    """The window the docs name: the platform took the preview's message and the daemon
    died before it kept its id (here, before it even had the id: the fake holds its answer
    while the daemon is killed). The restart cannot edit a message it does not know: the
    preview stays as it was, and the answer comes whole, once, in a new message."""
    llm.responder = lambda r: slowly(pace=0.3)  # about 9 s: killed well before the end
    killed = threading.Event()

    def kill_before_answering(sent: Sent) -> None:  # in the fake's thread, before its answer
        if not killed.is_set():
            daemon.stop(signal.SIGKILL)
            killed.set()

    telegram.on_sent = kill_before_answering
    daemon.start()
    telegram.push("tell me a long story")
    assert killed.wait(20), daemon.log.read_text()[-3000:]
    telegram.on_sent = None
    [preview] = telegram.visible(42)
    assert preview != ANSWER and ANSWER.startswith(preview.removesuffix(" …"))
    assert not preview_kept(daemon)
    llm.responder = lambda r: slowly(pace=0.05)
    daemon.start()
    assert wait_until(lambda: telegram.visible(42) == [preview, ANSWER], timeout=30), (
        telegram.visible(42)
    )
    assert daemon.stop() == 0  # what it had still to send went out first
    assert telegram.visible(42) == [preview, ANSWER], daemon.log.read_text()[-3000:]


def bash_then_answer(recorded: Recorded) -> Reply:
    last = recorded.body["messages"][-1]
    if last["role"] == "tool":
        return openai_stream(openai_completion("done"))
    if "sleep" in str(last.get("content")):
        return openai_stream(openai_completion(tool_calls=[("bash", {"command": "sleep 30"})]))
    return model(recorded)


def test_stop_ends_a_long_bash_call_and_the_session_goes_on(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c["agent"].update(approver={"allow": [{"tool": "bash"}]}))
    llm.responder = bash_then_answer
    daemon.start()
    telegram.push("please sleep")
    assert wait_until(lambda: telegram.actions, timeout=20)  # the turn runs
    # The preview says bash runs (in a fresh environment the model's first answer may come
    # seconds after the typing does), then bash is sleeping.
    assert wait_until(lambda: telegram.visible(42)[:1] == ["⏳ running `sleep 30`…"], timeout=20)
    assert daemon.proc is not None
    assert wait_until(lambda: runs_below(daemon.proc.pid, "sleep", "30"), timeout=10)
    telegram.push("/stop")
    assert wait_until(lambda: "Stopped." in telegram.visible(42), timeout=10)
    pid = daemon.proc.pid
    assert wait_until(lambda: not runs_below(pid, "sleep", "30"), timeout=10)  # killed, not done
    # The preview said what ran; it is left saying the turn was stopped.
    assert wait_until(lambda: telegram.visible(42)[0] == "(stopped)", timeout=5)
    assert telegram.sent[0].text == "⏳ running `sleep 30`…"
    telegram.push("hello again")
    assert wait_until(lambda: telegram.visible(42)[-1] == "echo: hello again", timeout=10)
    last_request = [r for r in llm.posts() if r.path.endswith("/chat/completions")][-1]
    roles = [m["role"] for m in last_request.body["messages"]]
    assert roles[-4:] == ["user", "assistant", "tool", "user"]  # the cut call was closed
    assert daemon.stop() == 0


def test_streaming_off_sends_the_answer_whole(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c["telegram"].update(streaming="off"))
    llm.responder = lambda r: slowly()
    daemon.start()
    telegram.push("tell me a long story")
    [sent] = telegram.wait_sent(1)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert sent.text == ANSWER and telegram.edits == [] and len(telegram.sent) == 1


def test_native_drafts_show_the_answer_as_it_is_written_then_it_is_sent_once(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c["telegram"].update(streaming="native"))
    llm.responder = lambda r: slowly()
    daemon.start()
    telegram.push("tell me a long story")
    [sent] = telegram.wait_sent(1)
    assert daemon.stop() == 0  # what it had still to send went out first
    assert sent.text == ANSWER and len(telegram.sent) == 1 and telegram.edits == []
    drafts = telegram.drafts
    assert len(drafts) >= 2 and len({d.message_id for d in drafts}) == 1  # one draft, animated
    assert ANSWER.startswith(drafts[-1].text.removesuffix(" …"))
    [first_token] = llm.first_tokens
    assert drafts[0].at - first_token >= 0.9  # as for edits
    assert all(b.at - a.at >= 0.9 for a, b in itertools.pairwise(drafts))


def test_the_stop_button_of_a_draft_stops_the_turn(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c["telegram"].update(streaming="native"))
    llm.responder = lambda r: slowly(pace=0.5)  # some 15 s of writing
    daemon.start()
    telegram.push("tell me a long story")
    assert wait_until(lambda: bool(telegram.drafts), timeout=20)
    draft = telegram.drafts[0]
    assert draft.can_stop  # the app shows its stop button
    telegram.stop_draft(draft)
    [stopped] = telegram.wait_sent(1)
    assert stopped.text == "Stopped."  # and below: the stopped turn's answer never comes
    telegram.push("still there?")  # the session goes on
    llm.responder = model
    assert telegram.wait_sent(2)[-1].text.startswith("echo: still there?")
    assert daemon.stop() == 0  # what it had still to send went out first
    # No answer of the stopped turn, before the next one's or after it.
    [_, answer] = [s.text for s in telegram.sent]
    assert answer.startswith("echo: still there?")


@dataclass
class Platform:
    """A chat platform as the kill test needs it: its config section, what its direct chat
    shows of the bot's messages, how to ask there, and a count of the bot's connections."""

    name: str
    section: dict[str, Any]
    shown: Callable[[], list[str]]
    ask: Callable[[str], None]
    connections: Callable[[], int]
    wait_connections: Callable[[int], None]


@pytest.fixture(params=["slack", "discord", "matrix"])
def platform(request: pytest.FixtureRequest) -> Iterator[Platform]:
    if request.param == "slack":
        slack = FakeSlack().start()
        yield Platform(
            name=request.param,
            section={
                "app_token": slack.app_token,
                "bot_token": slack.bot_token,
                "base_url": slack.url + "/api/",
                "allowlist": ["U0OWNER"],
            },
            shown=lambda: [p.shown for p in slack.posted],
            ask=lambda text: slack.message(text),
            connections=lambda: slack.connections,
            wait_connections=lambda n: slack.wait_connections(n, timeout=30),
        )
        slack.stop()
    elif request.param == "discord":
        discord = FakeDiscord().start()
        yield Platform(
            name=request.param,
            section={
                "token": discord.token,
                "api_base": discord.api_base,
                "gateway_url": discord.gateway_url,
                "allowlist": [DISCORD_OWNER],
            },
            shown=lambda: [m.shown for m in discord.sent],
            ask=lambda text: discord.dm(text),
            connections=lambda: discord.identifies,
            wait_connections=lambda n: discord.wait_ready(n, timeout=30),
        )
        discord.stop()
    else:
        matrix = MatrixHarness(request.getfixturevalue("synapse"))
        yield Platform(  # the real homeserver keeps what is sent until the bot syncs
            name="matrix",
            section={
                "homeserver_url": matrix.synapse.url,
                "user_id": matrix.bot["user_id"],
                "password": matrix.bot_password,
                "allowlist": [matrix.owner],
            },
            shown=matrix.shown,
            ask=lambda text: matrix.dm(text),
            connections=lambda: 0,
            wait_connections=lambda n: None,
        )


def test_a_kill_mid_stream_on_slack_discord_or_matrix_leaves_one_complete_answer(
    platform: Platform,
    daemon: Daemon,  # noqa: F811
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    """As on Telegram above, through the Slack and Discord adapters on their fakes and the
    Matrix adapter on the real Synapse: the preview the killed daemon left is finished by
    the next one, never answered twice."""
    edit_config(daemon, lambda c: c.update({platform.name: platform.section}))
    llm.responder = lambda r: slowly(pace=0.3)  # about 9 s: killed well before the end
    daemon.start()
    platform.wait_connections(1)
    platform.ask("tell me a long story")
    assert wait_until(lambda: len(platform.shown()) == 1, timeout=20), daemon.log.read_text()
    assert wait_until(lambda: preview_kept(daemon), timeout=10)  # and its id is kept
    daemon.stop(signal.SIGKILL)
    assert platform.shown()[0] != ANSWER
    llm.responder = lambda r: slowly(pace=0.05)
    before = platform.connections()
    daemon.start()
    platform.wait_connections(before + 1)
    assert wait_until(lambda: platform.shown() == [ANSWER], timeout=30), platform.shown()
    assert daemon.stop() == 0  # what it had still to send went out first
    assert platform.shown() == [ANSWER], daemon.log.read_text()[-3000:]  # one message, whole
