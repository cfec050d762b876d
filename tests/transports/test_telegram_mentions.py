"""Telegram mentions and /cmd@bot commands where the entity offsets (UTF-16 code units) and
Python's string indices (code points) part ways: after an emoji, in captions, several at once."""

from __future__ import annotations

import anyio
import pytest

from rousseau.messages import Inbound
from rousseau.transports.telegram import TelegramTransport
from tests.fakes.telegram import FakeTelegram
from tests.helpers import receiving

pytestmark = pytest.mark.anyio

GROUP = {"chat_id": -100, "user_id": 42, "chat_type": "supergroup"}


async def received(telegram: FakeTelegram, *pushes: dict[str, object]) -> list[Inbound]:
    """What the real transport hands over for these pushed group messages, in order."""
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)
    try:
        async with receiving(transport) as inbound:
            for push in pushes:
                telegram.push(**{**GROUP, **push})  # type: ignore[arg-type]
            with anyio.fail_after(20):
                while len(inbound) < len(pushes):
                    await anyio.sleep(0.02)
    finally:
        await transport.aclose()
    return inbound


async def test_an_emoji_before_the_mention_is_a_mention(telegram: FakeTelegram) -> None:
    [after_one, after_three] = await received(
        telegram,
        {"text": "a question", "mention": True, "prefix": "🎉 "},
        {"text": "another", "mention": True, "prefix": "🎉👍🏽 so "},
    )
    assert after_one.mentioned and after_one.text == "🎉 @rousseau_test_bot a question"
    assert after_three.mentioned and after_three.text == "🎉👍🏽 so @rousseau_test_bot another"


async def test_a_command_for_the_bot_after_an_emoji_loses_only_the_handle(
    telegram: FakeTelegram,
) -> None:
    [plain, cased] = await received(
        telegram,
        {"text": "🎉 /help@rousseau_test_bot please"},
        {"text": "🎉 /Help@Rousseau_Test_Bot please"},
    )
    assert plain.mentioned and plain.text == "🎉 /help please"
    assert cased.mentioned and cased.text == "🎉 /Help please"


async def test_every_command_for_the_bot_loses_its_handle(telegram: FakeTelegram) -> None:
    [both] = await received(
        telegram, {"text": "/new@rousseau_test_bot 🎉 then /help@rousseau_test_bot"}
    )
    assert both.mentioned and both.text == "/new 🎉 then /help"


async def test_a_captioned_photo_mentioning_the_bot_is_a_mention(telegram: FakeTelegram) -> None:
    [photo] = await received(
        telegram, {"text": "what is this?", "mention": True, "prefix": "🎉 ", "caption": True}
    )
    assert photo.mentioned and photo.text == "🎉 @rousseau_test_bot what is this?"


async def test_another_bots_handle_after_an_emoji_is_not_ours(telegram: FakeTelegram) -> None:
    [mention, command] = await received(
        telegram,
        {"text": "🎉 @other_helper_bot hi"},
        {"text": "🎉 /help@other_helper_bot please"},
    )
    assert not mention.mentioned and mention.text == "🎉 @other_helper_bot hi"
    assert not command.mentioned and command.text == "🎉 /help@other_helper_bot please"
