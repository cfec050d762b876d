"""Telegram: malformed updates, read as a poll or the webhook reads them (the SDK's parse,
then the adapter's), never raise and are recorded when refused. The end-to-end tests through
the fake Bot API are in tests/transports/test_poison_events.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import telegram
from hypothesis import example, given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from rousseau.transports.telegram import TelegramTransport
from tests.fakes.telegram import BOT_ID, BOT_USERNAME
from tests.fuzz.events import FUZZ, held, refusals, spoiled

pytestmark = pytest.mark.anyio

USER = {"id": 42, "is_bot": False, "first_name": "Ann", "last_name": "Lee"}
CHAT = {"id": -100, "type": "supergroup", "title": "Group"}
TEXT = f"@{BOT_USERNAME} hello /help@{BOT_USERNAME}"
VALID: list[dict[str, Any]] = [
    {
        "update_id": 1,
        "message": {
            "message_id": 7,
            "date": int(time.time()),
            "chat": CHAT,
            "from": USER,
            "text": TEXT,
            "entities": [
                {"type": "mention", "offset": 0, "length": 18},
                {"type": "bot_command", "offset": 25, "length": 23},
            ],
            "message_thread_id": 3,
            "is_topic_message": True,
            "reply_to_message": {
                "message_id": 6,
                "date": int(time.time()),
                "chat": CHAT,
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "R"},
                "text": "earlier",
            },
        },
    },
    {
        "update_id": 2,
        "message": {
            "message_id": 8,
            "date": int(time.time()),
            "chat": {"id": 42, "type": "private", "first_name": "Ann"},
            "from": USER,
            "caption": "look",
            "photo": [{"file_id": "p1", "file_unique_id": "u1", "width": 9, "height": 9}],
            "document": {"file_id": "d1", "file_unique_id": "u2", "file_name": "a.pdf"},
            "voice": {"file_id": "v1", "file_unique_id": "u3", "duration": 3},
        },
    },
    {
        "update_id": 3,
        "callback_query": {
            "id": "99",
            "from": USER,
            "chat_instance": "1",
            "data": "yes K7QD",
            "message": {"message_id": 5, "date": 1, "chat": CHAT, "text": "Approve?"},
        },
    },
    {
        "update_id": 4,
        "stopped_message_generation": {"chat": {"id": 42, "type": "private"}, "draft_id": 1},
    },
]


def adapter() -> TelegramTransport:
    made = TelegramTransport("123:fuzz", base_url="http://127.0.0.1:9")
    made._me = telegram.User(id=BOT_ID, first_name="R", is_bot=True, username=BOT_USERNAME)
    made.media = object()  # type: ignore[assignment]  # only whether files are taken in
    return made


@given(st.sampled_from(VALID).flatmap(lambda valid: spoiled(valid, keep=("update_id",))))
@example({**VALID[0], "message": {**VALID[0]["message"], "chat": {"id": "x", "type": "private"}}})
@example({**VALID[0], "message": {**VALID[0]["message"], "text": 12345}})
@FUZZ
async def test_a_polled_or_posted_update_is_read_or_refused(item: dict[str, Any]) -> None:
    transport = adapter()
    with capture_logs() as logs:
        read = transport._read(item["update_id"], transport._parse(item["update_id"], item))
    held(read.inbound, logs, "telegram")
    if read.inbound is None and read.update is None:  # refused, and said so (or never parsed)
        assert refusals(logs, "telegram")
    for file in read.files:
        assert isinstance(file.name, str) and isinstance(file.file_id, str)
        assert file.size is None or isinstance(file.size, int)


async def test_what_the_valid_updates_bring() -> None:
    """The fuzz starts from updates the adapter reads as messages."""
    transport = adapter()
    with capture_logs() as logs:
        read = [transport._read(u["update_id"], transport._parse(u["update_id"], u)) for u in VALID]
    assert not refusals(logs, "telegram")
    texts = [r.inbound.text if r.inbound else None for r in read]
    assert texts == [f"@{BOT_USERNAME} hello /help", "look", "yes K7QD", "/stop"]
    assert [f.name for f in read[1].files] == ["photo_8.jpg", "a.pdf", "voice_8.ogg"]
