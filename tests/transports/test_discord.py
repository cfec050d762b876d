"""Discord specifics beyond the conformance suite: mentions, replies, resume, rate limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import TransportAuthError
from rousseau.transports.discord import DiscordTransport
from tests.fakes.discord import GENERAL_ID, FakeDiscord
from tests.helpers import receiving
from tests.transports.harness_discord import DiscordHarness
from tests.transports.test_conformance import daemon, delivered, settle

pytestmark = pytest.mark.anyio


@pytest.fixture
def harness() -> Iterator[DiscordHarness]:
    made = DiscordHarness()
    yield made
    made.close()


async def test_everyone_is_not_a_mention_but_a_reply_to_the_bot_is(
    harness: DiscordHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path) as (_, provider):
        fake.message("meeting at noon", everyone=True)
        asked = fake.message("and what about me?", reply_to_bot=True)
        [reply] = await delivered(harness, 1)
        await settle()
    assert len(provider.requests) == 1
    assert reply.chat == GENERAL_ID and reply.text.endswith("and what about me?")
    # In a guild the answer is a reply to the question, and pings nobody.
    assert fake.sent[0].reference == asked["id"]


async def test_reconnect_request_resumes_and_keeps_serving(
    harness: DiscordHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    async with daemon(harness, tmp_path):
        fake.reconnect()
        with anyio.fail_after(15):
            while fake.resumes < 1:
                await anyio.sleep(0.05)
        harness.dm("still there?")
        [reply] = await delivered(harness, 1)
    assert reply.text == "echo: still there?" and fake.identifies == 1


async def test_rate_limit_on_send_is_honoured(harness: DiscordHarness, tmp_path: Path) -> None:
    harness.fake.rate_limit_once = True
    async with daemon(harness, tmp_path):
        harness.dm("hello")
        [reply] = await delivered(harness, 1)
    assert reply.text == "echo: hello"


async def test_bad_token_is_a_clear_error() -> None:
    fake = FakeDiscord().start()
    try:
        good = DiscordTransport(fake.token, api_base=fake.api_base, gateway_url=fake.gateway_url)
        assert await good.check() == "@rousseau"
        bad = DiscordTransport("wrong", api_base=fake.api_base, gateway_url=fake.gateway_url)
        with pytest.raises(TransportAuthError, match=r"^discord\.token: the bot token was"):
            await bad.check()
    finally:
        fake.stop()


async def test_answer_buttons_arrive_as_messages_from_whoever_pressed(
    harness: DiscordHarness,
) -> None:
    from rousseau.messages import Outbound
    from tests.fakes.discord import OWNER_ID

    fake = harness.fake
    transport = harness.transport()
    async with receiving(transport) as received:
        question = Outbound(
            transport="discord",
            chat_id=GENERAL_ID,
            text="Approve bash? [K7QD]",
            buttons=("yes K7QD", "no K7QD"),
        )
        await transport.send(question)
        [sent] = fake.sent
        labels = [c["label"] for row in sent.components for c in row["components"]]
        assert sent.content == "Approve bash? [K7QD]" and labels == ["yes K7QD", "no K7QD"]
        pressed_id = await anyio.to_thread.run_sync(lambda: fake.press(sent, "yes K7QD"))
        with anyio.fail_after(10):
            while not fake.interaction_answers:
                await anyio.sleep(0.02)
    [pressed] = received
    assert (pressed.text, pressed.sender_id, pressed.chat_id) == ("yes K7QD", OWNER_ID, GENERAL_ID)
    assert pressed.is_group and pressed.mentioned
    assert fake.interaction_answers[0][0] == pressed_id  # answered, so Discord shows no error


async def test_attachments_are_fetched_stored_and_shown_to_the_model(
    harness: DiscordHarness, tmp_path: Path
) -> None:
    fake = harness.fake
    png = b"\x89PNG\r\n\x1a\n" + bytes(40)
    async with daemon(harness, tmp_path) as (_, provider):
        fake.dm("what is this?", files=[("shot.png", png, "image/png")])
        fake.dm("", files=[("notes.txt", b"milk\neggs\n", "text/plain; charset=utf-8")])
        await delivered(harness, 2)
        fake.dm("hi", user_id="999999999999999999", files=[("x.png", png, "image/png")])
        await settle()
    first, second = (r.messages[-1] for r in provider.requests[:2])
    assert first.text == "what is this?"
    [shot] = first.attachments
    assert (shot.name, shot.media_type, provider.requests[0].media[shot.sha256]) == (
        "shot.png",
        "image/png",
        png,
    )
    [notes] = second.attachments  # an attachment alone is answered
    assert notes.media_type == "text/plain"
    assert (tmp_path / "ws" / notes.saved_as).read_bytes() == b"milk\neggs\n"
    assert len(fake.downloads) == 2  # the stranger's file was never fetched
