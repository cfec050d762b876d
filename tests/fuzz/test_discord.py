"""Discord: malformed MESSAGE_CREATE events, through discord.py's own parser as the adapter
guards it and then the adapter's reading, never raise and are recorded when refused. The
end-to-end test through the fake gateway is in tests/transports/test_poison_events.py."""

from __future__ import annotations

import datetime
from typing import Any

import discord
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from rousseau.messages import Inbound
from rousseau.transports.discord import DiscordTransport
from tests.fakes.discord import BOT_ID, GENERAL_ID, GUILD_ID, OWNER_ID
from tests.fuzz.events import FUZZ, held, refusals, spoiled

pytestmark = pytest.mark.anyio


def _user(user_id: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": "ann",
        "discriminator": "0",
        "global_name": "Ann",
        "avatar": None,
        "bot": bot,
    }


MESSAGE: dict[str, Any] = {
    "id": "100000000000000001",
    "channel_id": GENERAL_ID,
    "guild_id": GUILD_ID,
    "author": _user(OWNER_ID),
    "member": {"roles": [], "joined_at": "2024-01-01T00:00:00+00:00", "deaf": False, "mute": False},
    "content": f"<@{BOT_ID}> hello",
    "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
    "edited_timestamp": None,
    "tts": False,
    "mention_everyone": False,
    "mentions": [_user(BOT_ID, bot=True)],
    "mention_roles": [],
    "attachments": [
        {
            "id": "400000000000000001",
            "filename": "a.png",
            "size": 12,
            "url": "http://127.0.0.1:9/a.png",
            "proxy_url": "http://127.0.0.1:9/a.png",
            "content_type": "image/png",
        }
    ],
    "embeds": [],
    "pinned": False,
    "type": 0,
    "flags": 0,
}


class Reading:
    """The adapter's client as the gateway would drive it, without a gateway: each event
    goes through the guarded parser, and what discord.py dispatches as a message through
    the adapter's reading."""

    def __init__(self) -> None:
        self.transport = DiscordTransport("fuzz-token")
        self.transport.media = object()  # type: ignore[assignment]  # files are taken in

        async def nothing(inbound: Inbound) -> None:
            raise AssertionError("only read here, never handed over")

        self.client = self.transport._make_client(nothing)
        state = self.client._connection
        state.user = discord.ClientUser(state=state, data=_user(BOT_ID, bot=True))
        self.dispatched: list[discord.Message] = []
        state.dispatch = lambda event, *args: (  # type: ignore[method-assign]
            self.dispatched.append(args[0]) if event == "message" else None
        )

    def read(self, data: Any) -> list[Inbound | None]:
        self.dispatched.clear()
        self.client._connection.parsers["MESSAGE_CREATE"](data)  # guarded: never raises
        found = [self.transport._read(self.client, m) for m in self.dispatched]
        return [f[0] if f is not None else None for f in found]


@given(spoiled(MESSAGE))
@example({**MESSAGE, "content": 42})
@example({**MESSAGE, "channel_id": "general"})
@example({**MESSAGE, "id": str(2**80)})
@example({**MESSAGE, "content": "half \udc80 a pair"})
@FUZZ
async def test_a_gateway_message_is_read_or_refused(data: dict[str, Any]) -> None:
    reading = Reading()
    with capture_logs() as logs:
        read = reading.read(data)
    assert len(read) <= 1
    held(read[0] if read else None, logs, "discord")
    if not reading.dispatched:  # discord.py could not parse it: recorded
        assert refusals(logs, "discord")


async def test_the_valid_message_is_read() -> None:
    with capture_logs() as logs:
        [read] = Reading().read(MESSAGE)
    assert not refusals(logs, "discord")
    assert read is not None and (read.text, read.chat_id, read.mentioned) == (
        "hello",
        GENERAL_ID,
        True,
    )


OTHER = {"id": GUILD_ID, "channel_id": GENERAL_ID, "guild_id": GUILD_ID, "user_id": OWNER_ID}


@given(
    st.sampled_from(["GUILD_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE", "TYPING_START"]),
    spoiled(OTHER),
)
@FUZZ
async def test_any_other_gateway_event_never_ends_the_connection(kind: str, event: Any) -> None:
    reading = Reading()
    with capture_logs() as logs:
        reading.client._connection.parsers[kind](event)  # guarded: never raises
    for record in refusals(logs, "discord"):
        assert record["reason"] and record["kind"] == kind
