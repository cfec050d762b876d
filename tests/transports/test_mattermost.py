"""Mattermost beyond the conformance suite, against the fake Mattermost: a channel's answer
goes in the post's thread, a token the server refuses names the key, a malformed event is
skipped and the next one answered, a 429 is waited out, and what was posted while the stream
was down is fetched and answered once it is back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response, TransportAuthError, TransportError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.transports.mattermost import MattermostTransport
from tests.fakes.mattermost import (
    BOT_ID,
    DM_CHANNEL,
    OWNER_ID,
    TOKEN,
    TOWN_SQUARE,
    FakeMattermost,
)
from tests.helpers import build_from, config_in, free_port, serving, until

pytestmark = pytest.mark.anyio


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


@pytest.fixture
def fake() -> Iterator[FakeMattermost]:
    server = FakeMattermost().start()
    yield server
    server.stop()


def replies(fake: FakeMattermost) -> list[tuple[str, str, str]]:
    return [(p.channel_id, p.root_id, p.message) for p in fake.bot_posts()]


async def test_a_channel_answer_goes_in_the_thread_of_the_post(
    fake: FakeMattermost, tmp_path: Path
) -> None:
    transport = MattermostTransport(fake.url, TOKEN)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        asked = fake.say(OWNER_ID, TOWN_SQUARE, "@rousseau what is up?", mentions=[BOT_ID])
        await until(lambda: len(replies(fake)) == 1, 20)
        fake.say(OWNER_ID, TOWN_SQUARE, "@rousseau and then?", root_id=asked.id, mentions=[BOT_ID])
        await until(lambda: len(replies(fake)) == 2, 20)
    assert replies(fake) == [
        (TOWN_SQUARE, asked.id, "echo: alice: what is up?"),  # who said it, in a channel
        (TOWN_SQUARE, asked.id, "echo: alice: and then?"),
    ]


async def test_a_refused_token_names_the_key_and_an_unreachable_server_is_transient() -> None:
    fake = FakeMattermost().start()
    try:
        with pytest.raises(TransportAuthError, match=r"^mattermost\.token: the server refused"):
            await MattermostTransport(fake.url, "not-the-token").check()
        refused = MattermostTransport(fake.url, "not-the-token")
        with pytest.raises(TransportAuthError, match=r"^mattermost\.token"):
            await refused.run(FunctionProvider(echo))  # type: ignore[arg-type]
        await refused.aclose()
    finally:
        fake.stop()
    gone = MattermostTransport(f"http://127.0.0.1:{free_port()}", TOKEN)
    with pytest.raises(TransportError) as raised:
        await gone.check()
    assert not isinstance(raised.value, TransportAuthError)
    await gone.aclose()


async def test_malformed_events_are_skipped_and_the_next_answered(
    fake: FakeMattermost, tmp_path: Path
) -> None:
    transport = MattermostTransport(fake.url, TOKEN)
    poisons = [
        "not json at all",
        json.dumps({"event": "posted", "data": "not an object", "seq": 90}),
        json.dumps({"event": "posted", "data": {"post": "{broken"}, "seq": 91}),
        json.dumps({"event": "posted", "data": {"post": json.dumps({"user_id": 7})}, "seq": 92}),
        json.dumps({"event": "posted", "data": {"post": json.dumps([1, 2])}, "seq": 93}),
        # metadata of the wrong shape: it once escaped the checks and restarted the stream
        json.dumps(
            {
                "event": "posted",
                "data": {
                    "channel_type": "D",
                    "post": json.dumps(
                        {
                            "id": "p" * 26,
                            "user_id": OWNER_ID,
                            "channel_id": DM_CHANNEL,
                            "message": "hi",
                            "create_at": 1,
                            "metadata": "not an object",
                        }
                    ),
                },
                "seq": 94,
            }
        ),
    ]
    with capture_logs() as logs:
        async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
            for poison in poisons:
                fake.send_raw(poison)
            fake.say(OWNER_ID, DM_CHANNEL, "still fine?")
            await until(lambda: replies(fake) == [(DM_CHANNEL, "", "echo: still fine?")], 20)
    bad = [e for e in logs if e["event"] == "mattermost.bad_event"]
    assert len(bad) == len(poisons) and not [e for e in bad if e["exc_info"]]  # all foreseen
    assert not [e for e in logs if e["event"] in ("transport.failed", "transport.restart")]


async def test_a_rate_limit_is_waited_out(fake: FakeMattermost, tmp_path: Path) -> None:
    transport = MattermostTransport(fake.url, TOKEN)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        fake.limited = 2  # the next two calls (typing, then the post) are answered 429
        fake.say(OWNER_ID, DM_CHANNEL, "hello")
        await until(lambda: replies(fake) == [(DM_CHANNEL, "", "echo: hello")], 20)


async def test_what_was_posted_while_the_stream_was_down_is_answered(
    fake: FakeMattermost, tmp_path: Path
) -> None:
    transport = MattermostTransport(fake.url, TOKEN)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        fake.say(OWNER_ID, DM_CHANNEL, "first")
        await until(lambda: len(replies(fake)) == 1, 20)
        connections = fake.authenticated
        fake.drop()
        fake.say(OWNER_ID, DM_CHANNEL, "said while you were away", live=False)
        await until(lambda: fake.authenticated > connections, 20)
        await until(lambda: len(replies(fake)) == 2, 20)
        await anyio.sleep(0.5)
    assert [text for _, _, text in replies(fake)] == [
        "echo: first",
        "echo: said while you were away",
    ]


async def test_the_fake_speaks_the_documented_wire(fake: FakeMattermost) -> None:
    """The fake itself, by plain HTTP and websocket calls (no rousseau code): what the API
    reference says the server sends."""
    import aiohttp

    api = f"{fake.url}/api/v4"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api}/users/me", headers={"Authorization": "Bearer x"}) as r:
            error = await r.json()
            assert r.status == 401 and error["status_code"] == 401
            assert error["id"] == "api.context.session_expired.app_error" and error["message"]
        fake.limited = 1
        async with http.get(f"{api}/users/me", headers=bearer) as r:
            assert r.status == 429 and r.headers["X-Ratelimit-Remaining"] == "0"
            assert float(r.headers["X-Ratelimit-Reset"]) > 0
        body = {"channel_id": DM_CHANNEL, "message": "hi", "root_id": ""}
        async with http.post(f"{api}/posts", json=body, headers=bearer) as r:
            post = await r.json()
            assert r.status == 201 and len(post["id"]) == 26 and post["user_id"] == BOT_ID
        patch = {"message": "hi again"}
        async with http.put(f"{api}/posts/{post['id']}/patch", json=patch, headers=bearer) as r:
            assert r.status == 200 and (await r.json())["message"] == "hi again"
        async with http.ws_connect(f"{fake.ws_url}/api/v4/websocket") as ws:
            challenge = {"seq": 1, "action": "authentication_challenge", "data": {"token": TOKEN}}
            await ws.send_json(challenge)
            assert await ws.receive_json() == {"status": "OK", "seq_reply": 1}
            assert (await ws.receive_json())["event"] == "hello"
            await anyio.to_thread.run_sync(
                lambda: fake.say(OWNER_ID, DM_CHANNEL, "yo", mentions=[BOT_ID])
            )
            event = await ws.receive_json()
    assert event["event"] == "posted" and event["data"]["channel_type"] == "D"
    sent = json.loads(event["data"]["post"])  # a JSON string inside the event, as documented
    assert sent["message"] == "yo" and sent["user_id"] == OWNER_ID
    assert json.loads(event["data"]["mentions"]) == [BOT_ID]


def test_a_section_without_what_it_needs_names_the_key_and_doctor_knows_an_id(
    tmp_path: Path,
) -> None:
    from rousseau.agent import ConfigError
    from rousseau.cli.doctor import SENDER_SHAPES

    def built(section: str) -> None:
        build_from(tmp_path, f"mattermost:\n{section}")

    with pytest.raises(ConfigError, match=r"^mattermost\.url: not set"):
        built("  token: x\n")
    with pytest.raises(ConfigError, match=r"^mattermost\.url: 'chat.example.org' is not"):
        built("  url: chat.example.org\n  token: x\n")
    with pytest.raises(ConfigError, match=r"^mattermost\.token: not set; set it or MATTERMOST"):
        built("  url: https://chat.example.org\n")
    shape, _ = SENDER_SHAPES["mattermost"]
    assert shape.match(OWNER_ID) and not shape.match("alice") and not shape.match("@alice")


async def test_answers_come_as_buttons_and_a_press_as_a_message(fake: FakeMattermost) -> None:
    from rousseau.messages import Outbound
    from tests.helpers import receiving_posts

    port = free_port()
    actions = (f"http://127.0.0.1:{port}/mattermost/actions", f"127.0.0.1:{port}")
    transport = MattermostTransport(fake.url, TOKEN, actions=actions)
    async with receiving_posts(transport, port) as taken:
        question = Outbound(
            transport="mattermost",
            chat_id=DM_CHANNEL,
            text="Approve bash? [K7QD]",
            buttons=("yes K7QD", "no K7QD"),
        )
        await transport.send(question)
        [sent] = fake.bot_posts()
        assert await anyio.to_thread.run_sync(fake.press, sent, "yes K7QD") == 200
        # A press the bot's buttons did not make (its proof made up) reaches nobody.
        forged = fake.posts[-1]
        forged.props["attachments"][0]["actions"][1]["integration"]["context"]["proof"] = "x"
        assert await anyio.to_thread.run_sync(fake.press, forged, "no K7QD") == 403
        assert await anyio.to_thread.run_sync(fake.press, sent, "yes K7QD") == 200  # again
    assert sent.message == "Approve bash? [K7QD]"
    assert [(i.text, i.sender_id, i.chat_id) for i in taken] == [
        ("yes K7QD", OWNER_ID, DM_CHANNEL)
    ] * 2
    assert taken[0].message_id == taken[1].message_id  # a second press is the same answer
