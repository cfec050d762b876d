"""Feishu beyond the conformance suite, against the fake Feishu: a group's answer is a reply
to the message, refused credentials name the key, an event is answered only once its
message is kept (and answered 500 when it could not be, then taken when Feishu sends it
again), malformed events and another app's are skipped, approvals come as a card whose
press is a message, a rate limit is waited out, a stale token is fetched anew, and the fake
itself speaks the documented wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response, TransportAuthError, TransportError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.messages import Inbound, Outbound
from rousseau.transports.feishu import FeishuTransport
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    DATA,
    DM_CHAT,
    GROUP_CHAT,
    OWNER_ID,
    Event,
    FakeFeishu,
    decode_frame,
    encode_frame,
)
from tests.helpers import build_from, config_in, free_port, serving, until

pytestmark = pytest.mark.anyio


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    server = FakeFeishu().start()
    yield server
    server.stop()


def transport_of(fake: FakeFeishu) -> FeishuTransport:
    return FeishuTransport(APP_ID, APP_SECRET, base_url=fake.url)


def replies(fake: FakeFeishu) -> list[tuple[str, str | None, str]]:
    return [(s.chat_id, s.reply_to, s.shown) for s in fake.sent]


async def test_a_group_answer_is_a_reply_to_the_message(fake: FakeFeishu, tmp_path: Path) -> None:
    async with serving(transport_of(fake), config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        asked = await anyio.to_thread.run_sync(
            lambda: fake.say(OWNER_ID, GROUP_CHAT, "what is up?", mention=True)
        )
        await until(lambda: len(fake.sent) == 1, 20)
    message_id = asked.body["event"]["message"]["message_id"]
    [(chat, reply_to, said)] = replies(fake)
    assert (chat, reply_to) == (GROUP_CHAT, message_id)
    assert said.endswith("what is up?") and "@_user_1" not in said


async def test_refused_credentials_name_the_key_and_an_unreachable_server_is_transient(
    fake: FakeFeishu,
) -> None:
    wrong = FeishuTransport(APP_ID, "not-the-secret", base_url=fake.url)
    with pytest.raises(TransportAuthError, match=r"^feishu\.app_secret: Feishu refused"):
        await wrong.check()
    with pytest.raises(TransportAuthError, match=r"^feishu\.app_secret"):
        await wrong.run(FunctionProvider(echo))  # type: ignore[arg-type]
    assert fake.endpoints == 0  # never got as far as the long connection
    gone = FeishuTransport(APP_ID, APP_SECRET, base_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransportError) as raised:
        await gone.check()
    assert not isinstance(raised.value, TransportAuthError)


async def test_an_event_is_acknowledged_only_once_its_message_is_kept(fake: FakeFeishu) -> None:
    """The frame's answer waits for the handler: 500 when it failed (Feishu sends the
    event again), 200 once it took the message."""
    transport = transport_of(fake)
    taken: list[Inbound] = []
    failures = [RuntimeError("the store is full")]

    async def handler(inbound: Inbound) -> None:
        await anyio.sleep(0.3)  # a slow commit: the answer must wait for it
        if failures:
            raise failures.pop()
        taken.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(transport.run, handler)
        event = await anyio.to_thread.run_sync(lambda: fake.say(OWNER_ID, DM_CHAT, "keep me"))
        first = await anyio.to_thread.run_sync(fake.answered, event)
        assert first["code"] == 500 and taken == []
        await anyio.to_thread.run_sync(fake.redeliver)
        await until(lambda: len(event.answers) == 2, 20)
        assert event.answers[-1]["code"] == 200
        assert [i.text for i in taken] == ["keep me"]
        await transport.stop()
    assert not transport.connected


async def test_malformed_events_and_another_apps_are_skipped_and_the_next_answered(
    fake: FakeFeishu, tmp_path: Path
) -> None:
    async with serving(transport_of(fake), config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        with capture_logs() as logs:
            bad = [
                fake.say(OWNER_ID, DM_CHAT, kind="text", content=["not", "an", "object"]),  # type: ignore[arg-type]
                fake.push("im.message.receive_v1", {"sender": "nobody", "message": {}}),
                fake.say(OWNER_ID, DM_CHAT, "for another app", app_id="cli_someoneelse000"),
            ]
            junk = Event("junk0001", {})
            fake.events.append(junk)
            await anyio.to_thread.run_sync(lambda: fake.deliver(junk, raw=b"{not json"))
            await anyio.to_thread.run_sync(lambda: fake.say(OWNER_ID, DM_CHAT, "still there?"))
            await until(lambda: len(fake.sent) == 1, 20)
        for event in bad:  # taken (and dropped): Feishu is not to send them again
            assert (await anyio.to_thread.run_sync(fake.answered, event))["code"] == 200
        assert (await anyio.to_thread.run_sync(fake.answered, junk))["code"] == 500  # the SDK's
    assert replies(fake) == [(DM_CHAT, None, "echo: still there?")]
    refused = [e for e in logs if e["event"] == "feishu.bad_event"]
    assert len(refused) == 3, logs


async def test_answers_come_as_a_card_and_a_press_as_a_message(fake: FakeFeishu) -> None:
    transport = transport_of(fake)
    taken: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        taken.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(transport.run, handler)
        ask = Outbound(
            transport="feishu", chat_id=DM_CHAT, text="Run `ls`?", buttons=("yes K7QD", "no K7QD")
        )
        await transport.send(ask)
        [card] = fake.sent
        assert (card.msg_type, card.shown, card.buttons) == (
            "interactive",
            "Run `ls`?",
            ["yes K7QD", "no K7QD"],
        )
        pressed = await anyio.to_thread.run_sync(lambda: fake.press(card, "no K7QD"))
        answer = await anyio.to_thread.run_sync(fake.answered, pressed)
        await transport.stop()
    assert answer["code"] == 200 and answer["data"]["toast"]["content"] == "Answered: no K7QD"
    [press] = taken
    assert (press.chat_id, press.sender_id, press.text) == (DM_CHAT, OWNER_ID, "no K7QD")
    assert not press.is_group  # the chat's kind asked of the API


async def test_a_rate_limit_is_waited_out_and_a_stale_token_fetched_anew(
    fake: FakeFeishu, tmp_path: Path
) -> None:
    async with serving(transport_of(fake), config_in(tmp_path), FunctionProvider(echo), [OWNER_ID]):
        await anyio.to_thread.run_sync(lambda: fake.say(OWNER_ID, DM_CHAT, "first"))
        await until(lambda: len(fake.sent) == 1, 20)
        fake.limited = 1
        fake.token = "t-rotated"  # the one the bot holds is no longer good
        await anyio.to_thread.run_sync(lambda: fake.say(OWNER_ID, DM_CHAT, "second"))
        await until(lambda: len(fake.sent) == 2, 20)
    assert [s.shown for s in fake.sent] == ["echo: first", "echo: second"]
    assert fake.limited == 0


async def test_the_fake_speaks_the_documented_wire(fake: FakeFeishu) -> None:
    """Its frames are what the platform's protobuf says (read back by the SDK's own compiled
    Frame), and its API refuses what Feishu refuses."""
    import aiohttp
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame

    raw = encode_frame(DATA, {"type": "event", "message_id": "m1"}, b'{"a":1}', seq=3)
    frame = Frame()
    frame.ParseFromString(raw)
    assert (frame.SeqID, frame.method, frame.payload) == (3, DATA, b'{"a":1}')
    assert {h.key: h.value for h in frame.headers} == {"type": "event", "message_id": "m1"}
    frame.payload = json.dumps({"code": 200}).encode()
    assert decode_frame(frame.SerializeToString())[1:] == (
        {"type": "event", "message_id": "m1"},
        b'{"code": 200}',
    )
    async with aiohttp.ClientSession() as http:
        token_url = f"{fake.url}/open-apis/auth/v3/tenant_access_token/internal"
        async with http.post(token_url, json={"app_id": APP_ID, "app_secret": "x"}) as answer:
            assert (await answer.json())["code"] == 10014
        async with http.post(token_url, json={"app_id": APP_ID, "app_secret": APP_SECRET}) as ok:
            token = (await ok.json())["tenant_access_token"]
        messages = f"{fake.url}/open-apis/im/v1/messages"
        body = {"receive_id": DM_CHAT, "msg_type": "text", "content": json.dumps({"text": "hi"})}
        async with http.post(messages, params={"receive_id_type": "chat_id"}, json=body) as no:
            assert (no.status, (await no.json())["code"]) == (400, 99991663)
        fake.limited = 1
        headers = {"Authorization": f"Bearer {token}"}
        async with http.post(
            messages, params={"receive_id_type": "chat_id"}, json=body, headers=headers
        ) as limited:
            assert (limited.status, (await limited.json())["code"]) == (429, 99991400)
            assert limited.headers["x-ogw-ratelimit-reset"] == "1"
        async with http.post(
            messages, params={"receive_id_type": "chat_id"}, json=body, headers=headers
        ) as sent:
            assert (await sent.json())["data"]["message_id"].startswith("om_")


def test_a_section_without_what_it_needs_names_the_key_and_doctor_knows_an_id(
    tmp_path: Path,
) -> None:
    from rousseau.agent import ConfigError
    from rousseau.cli.doctor import SENDER_SHAPES

    def built(section: str) -> None:
        build_from(tmp_path, f"feishu:\n{section}")

    with pytest.raises(ConfigError, match=r"^feishu\.app_id: not set"):
        built("  app_secret: x\n")
    with pytest.raises(ConfigError, match=r"^feishu\.app_secret: not set; set it or FEISHU"):
        built(f"  app_id: {APP_ID}\n")
    with pytest.raises(ConfigError, match=r"^feishu\.base_url: 'http://open.example' is not"):
        built(f"  app_id: {APP_ID}\n  app_secret: x\n  base_url: http://open.example\n")
    with pytest.raises(ConfigError, match=r"^feishu\.base_url: .* has a path"):
        built(f"  app_id: {APP_ID}\n  app_secret: x\n  base_url: https://x.cn/open\n")
    shape, _ = SENDER_SHAPES["feishu"]
    assert shape.match(OWNER_ID) and not shape.match("alice") and not shape.match("on_" + "0" * 32)
