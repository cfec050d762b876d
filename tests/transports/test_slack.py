"""Slack specifics beyond the conformance suite: threads, acks, retries, edits, reconnects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import TransportAuthError
from rousseau.transports.slack import SlackTransport, to_mrkdwn
from tests.fakes.slack import BOT_USER, FakeSlack
from tests.helpers import receiving
from tests.transports.harness_slack import SlackHarness
from tests.transports.test_conformance import daemon, delivered, settle

pytestmark = pytest.mark.anyio


@pytest.fixture
def harness() -> Iterator[SlackHarness]:
    made = SlackHarness()
    yield made
    made.close()


async def test_channel_mention_starts_a_thread_and_the_thread_continues(
    harness: SlackHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path) as (_, provider):
        event = fake.mention("what's up?")
        [first] = await delivered(harness, 1)
        assert first.chat == "C0GENERAL" and first.thread == event["ts"]
        # A follow-up in that thread needs no mention; one in the channel does.
        fake.message("and also?", channel="C0GENERAL", thread_ts=event["ts"])
        fake.message("unrelated chatter", channel="C0GENERAL")
        second = (await delivered(harness, 2))[1]
        await settle()
    assert second.thread == event["ts"] and second.text == "echo: and also?"
    assert len(harness.delivered()) == 2
    # One session per thread: the follow-up saw the first exchange.
    assert [m.text for m in provider.requests[1].messages] == [
        "what's up?",
        "echo: what's up?",
        "and also?",
    ]


async def test_every_envelope_is_acknowledged_and_a_retry_answered_once(
    harness: SlackHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path) as (_, provider):
        event = fake.message("once please")
        first = fake.send_event(event, retry=1)  # Slack retrying: same message, new envelope
        await delivered(harness, 1)
        await settle()
    assert len(harness.delivered()) == 1 and len(provider.requests) == 1
    assert first in fake.acked and len(fake.acked) >= 2


async def test_edits_deletes_and_bots_are_ignored(harness: SlackHarness, tmp_path: Path) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path) as (_, provider):
        fake.message("edited", subtype="message_changed")
        fake.message("gone", subtype="message_deleted")
        fake.message("I am another bot", user="U0OTHERBOT", bot=True)
        fake.message("real question")
        await delivered(harness, 1)
        await settle()
    assert len(provider.requests) == 1


async def test_reconnects_after_a_disconnect_frame(harness: SlackHarness, tmp_path: Path) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path):
        fake.disconnect()
        with anyio.fail_after(15):
            while fake.connections < 2:
                await anyio.sleep(0.05)
        harness.dm("still here?")
        [reply] = await delivered(harness, 1)
    assert reply.text == "echo: still here?"


async def test_bot_user_is_discovered_and_a_bad_token_is_clear() -> None:
    fake = FakeSlack().start()
    try:
        transport = SlackTransport(fake.app_token, fake.bot_token, base_url=fake.url + "/api/")
        assert await transport.check() == f"<@{BOT_USER}>"
        await transport.aclose()
        bad = SlackTransport(fake.app_token, "xoxb-wrong", base_url=fake.url + "/api/")
        with pytest.raises(TransportAuthError, match=r"^slack\.bot_token: .*\(invalid_auth\)"):
            await bad.check()
        await bad.aclose()
    finally:
        fake.stop()


def test_markdown_becomes_mrkdwn() -> None:
    assert to_mrkdwn("**bold** and *it* and ~~gone~~") == "*bold* and _it_ and ~gone~"
    assert to_mrkdwn("see [the docs](https://example.org/a?b=1&c=2)") == (
        "see <https://example.org/a?b=1&amp;c=2|the docs>"
    )
    assert to_mrkdwn("# Title\ntext") == "*Title*\ntext"
    assert to_mrkdwn("a < b & c") == "a &lt; b &amp; c"
    code = "```\nx = **not bold** < 3\n```"
    assert to_mrkdwn(code) == code
    assert to_mrkdwn("use `**x**` here") == "use `**x**` here"


async def test_envelope_is_acknowledged_only_after_the_message_is_persisted() -> None:
    from rousseau.messages import Inbound

    fake = FakeSlack().start()
    transport = SlackTransport(fake.app_token, fake.bot_token, base_url=fake.url + "/api/")
    persisted = anyio.Event()
    seen: list[Inbound] = []

    async def slow_store(inbound: Inbound) -> None:
        seen.append(inbound)
        await persisted.wait()  # the Router has not committed it yet

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(transport.run, slow_store)
            envelope = await anyio.to_thread.run_sync(
                lambda: fake.send_event(
                    {
                        "type": "message",
                        "channel": "D0DM",
                        "user": "U0OWNER",
                        "text": "hi",
                        "ts": "1.000001",
                        "channel_type": "im",
                    }
                )
            )
            with anyio.fail_after(10):
                while not seen:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.3)
            assert envelope not in fake.acked
            persisted.set()
            with anyio.fail_after(10):
                while envelope not in fake.acked:
                    await anyio.sleep(0.02)
            await transport.stop()
    finally:
        await transport.aclose()
        fake.stop()
    assert seen[0].message_id == "D0DM:1.000001"


async def test_answer_buttons_arrive_as_messages_from_whoever_pressed(
    harness: SlackHarness,
) -> None:
    from rousseau.messages import Outbound

    fake = harness.fake
    transport = harness.transport()
    async with receiving(transport) as received:
        question = Outbound(
            transport="slack",
            chat_id="D0OWNER",
            text="Approve bash? [K7QD]",
            buttons=("yes K7QD", "no K7QD"),
        )
        await transport.send(question)
        [posted] = fake.posted
        assert posted.text == "Approve bash? [K7QD]"  # the fallback text says how to answer
        assert posted.blocks is not None
        labels = [e["text"]["text"] for e in posted.blocks[1]["elements"]]
        assert labels == ["yes K7QD", "no K7QD"]
        envelope = await anyio.to_thread.run_sync(
            lambda: fake.press(posted, "no K7QD", user="U0OWNER")
        )
        with anyio.fail_after(10):
            while not received or envelope not in fake.acked:
                await anyio.sleep(0.02)
    [pressed] = received
    assert (pressed.text, pressed.sender_id, pressed.chat_id) == ("no K7QD", "U0OWNER", "D0OWNER")
    assert not pressed.is_group


async def test_shared_files_are_fetched_with_the_bot_token_and_shown_to_the_model(
    harness: SlackHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    pdf = b"%PDF-1.4\n%fake\n"
    async with daemon(harness, tmp_path) as (_, provider):
        fake.message("summarise this", files=[("q3.pdf", pdf, "application/pdf")])
        await delivered(harness, 1)
        fake.message("", files=[("list.txt", b"milk\n", "text/plain")])
        await delivered(harness, 2)
        fake.message("hi", user="U0STRANGER", files=[("x.txt", b"x", "text/plain")])
        await settle()
    first, second = (r.messages[-1] for r in provider.requests[:2])
    [report] = first.attachments
    assert (first.text, report.name, provider.requests[0].media[report.sha256]) == (
        "summarise this",
        "q3.pdf",
        pdf,
    )
    [listed] = second.attachments  # a file alone is answered
    assert (tmp_path / "ws" / listed.saved_as).read_bytes() == b"milk\n"
    assert len(fake.downloads) == 2  # the stranger's file was never fetched


async def test_the_bot_token_goes_to_slack_file_hosts_only(tmp_path: Path) -> None:
    from rousseau.media import BlobStore

    transport = SlackTransport("xapp-1", "xoxb-secret", base_url="http://127.0.0.1:9/api/")
    into = BlobStore(folder=tmp_path / "media").download(1000)
    with pytest.raises(PermissionError, match=r"not a Slack file address: evil\.example"):
        await transport._download("https://evil.example/files-pri/T1-F1/x.pdf", into)
