"""Google Chat beyond the conformance suite, against the fake Google: a post without Chat's
token (forged, expired, for another app, or none) is refused and reaches nobody; approvals
come as card buttons whose clicks arrive as messages; an answer in a space stays in the
message's thread; a malformed event is skipped; a refused key names the setting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from rousseau.agent import ConfigError, TransportAuthError
from rousseau.messages import Inbound, Outbound
from rousseau.transports.googlechat import GoogleChatTransport
from tests.fakes.googlechat import APP, DM_SPACE, OWNER, PROJECT, ROOM, FakeGoogleChat
from tests.helpers import build_from, free_port, receiving_posts

pytestmark = pytest.mark.anyio


async def ignore(inbound: Inbound) -> None:
    pass


@pytest.fixture
def fake() -> Iterator[FakeGoogleChat]:
    server = FakeGoogleChat().start()
    yield server
    server.stop()


def transport_for(fake: FakeGoogleChat, folder: Path, port: int) -> GoogleChatTransport:
    return GoogleChatTransport(
        json.loads(fake.credentials(folder).read_text()),
        audience=PROJECT,
        listen=f"127.0.0.1:{port}",
        api_base=fake.url,
        certs_url=f"{fake.url}/certs",
    )


async def test_only_chats_own_tokens_for_this_app_are_taken(
    fake: FakeGoogleChat, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/googlechat"
    event = fake.message(DM_SPACE, OWNER, "let me in")
    refusals = {
        "forged": fake.token(forged=True),
        "expired": fake.token(age=7200),
        "another app": fake.token(audience="999999999999"),
        "not Chat": fake.token(issuer="someone@example.iam.gserviceaccount.com"),
        "no token": "",
        "garbage": "not.a.token",
    }
    with capture_logs() as logs:
        async with receiving_posts(transport_for(fake, tmp_path, port), port) as taken:
            for why, token in refusals.items():
                status = await anyio.to_thread.run_sync(fake.post, url, event, token)
                assert status == 401, why
            assert await anyio.to_thread.run_sync(fake.post, url, event) == 200
    assert [i.text for i in taken] == ["let me in"]  # the refused posts reached nobody
    assert len([e for e in logs if e["event"] == "googlechat.post_refused"]) == len(refusals) - 1


async def test_answers_come_as_buttons_and_a_click_as_a_message(
    fake: FakeGoogleChat, tmp_path: Path
) -> None:
    port = free_port()
    transport = transport_for(fake, tmp_path, port)
    async with receiving_posts(transport, port) as taken:
        question = Outbound(
            transport="googlechat",
            chat_id=DM_SPACE,
            text="Approve bash? [K7QD]",
            buttons=("yes K7QD", "no K7QD"),
        )
        await transport.send(question)
        [sent] = fake.sent
        [card] = sent.cards
        buttons = card["card"]["sections"][0]["widgets"][0]["buttonList"]["buttons"]
        assert [b["text"] for b in buttons] == ["yes K7QD", "no K7QD"]
        url = f"http://127.0.0.1:{port}/googlechat"
        status = await anyio.to_thread.run_sync(fake.post, url, fake.click(sent, "yes K7QD"))
        assert status == 200
    [pressed] = taken
    assert (pressed.text, pressed.sender_id, pressed.chat_id) == ("yes K7QD", OWNER, DM_SPACE)
    assert pressed.mentioned and not pressed.is_group


async def test_in_a_space_the_answer_stays_in_the_thread_and_bad_events_are_skipped(
    fake: FakeGoogleChat, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/googlechat"
    transport = transport_for(fake, tmp_path, port)
    asked = fake.message(ROOM, OWNER, "what is up?", mention=True)
    with capture_logs() as logs:
        async with receiving_posts(transport, port) as taken:
            for bad in ([1, 2], {"type": "MESSAGE", "message": {"name": 7}}, {"type": "MESSAGE"}):
                assert await anyio.to_thread.run_sync(fake.post, url, bad) == 200  # not again
            assert await anyio.to_thread.run_sync(fake.post, url, asked) == 200
            [inbound] = taken
            await transport.send(
                Outbound(
                    transport="googlechat",
                    chat_id=inbound.chat_id,
                    thread_id=inbound.thread_id,
                    text="all good",
                )
            )
    assert inbound.text == "what is up?" and inbound.is_group and inbound.mentioned
    [sent] = fake.sent
    assert (sent.space, sent.thread) == (ROOM, asked["message"]["thread"]["name"])
    assert len([e for e in logs if e["event"] == "googlechat.bad_event"]) == 3


async def test_a_refused_key_names_the_setting(fake: FakeGoogleChat, tmp_path: Path) -> None:
    fake.refuse_grants = True
    transport = transport_for(fake, tmp_path, free_port())
    with pytest.raises(TransportAuthError, match=r"^googlechat\.credentials_file: Google refused"):
        await transport.check()
    with pytest.raises(TransportAuthError, match=r"^googlechat\.credentials_file"):
        await transport.run(ignore)
    await transport.aclose()
    fake.refuse_grants = False
    assert await transport_for(fake, tmp_path, free_port()).check() == APP


def test_a_section_without_what_it_needs_names_the_key(tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    with pytest.raises(ConfigError, match=r"^googlechat\.credentials_file: not set"):
        build_from(tmp_path, "googlechat:\n  audience: '1'\n")
    with pytest.raises(ConfigError, match=r"^googlechat\.credentials_file: cannot read"):
        build_from(tmp_path, f"googlechat:\n  credentials_file: {key}\n  audience: '1'\n")
    key.write_text('{"type": "service_account"}')
    with pytest.raises(ConfigError, match=r"^googlechat\.credentials_file: .* not a service"):
        build_from(tmp_path, f"googlechat:\n  credentials_file: {key}\n  audience: '1'\n")


async def test_a_rate_limited_send_is_sent_once_the_wait_is_over(
    fake: FakeGoogleChat, tmp_path: Path
) -> None:
    """The 429 ends the send with Throttled; the outbox sends again when Google said."""
    from rousseau.agent import Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply
    from tests.helpers import config_in, serving, until

    def echo(request: Request) -> Response:
        return text_reply("echo: " + request.messages[-1].text)

    port = free_port()
    transport = transport_for(fake, tmp_path, port)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER]):
        fake.limited = 1
        event = fake.message(DM_SPACE, OWNER, "hello")
        url = f"http://127.0.0.1:{port}/googlechat"
        assert await anyio.to_thread.run_sync(fake.post, url, event) == 200
        await until(lambda: bool(fake.sent), 20)
        await anyio.sleep(0.5)
    assert [s.text for s in fake.sent] == ["echo: hello"] and fake.limited == 0


def test_the_doctor_knows_a_chat_user() -> None:
    from rousseau.cli.doctor import SENDER_SHAPES

    shape, _ = SENDER_SHAPES["googlechat"]
    assert shape.match(OWNER) and not shape.match("alice@example.org")


async def test_the_fake_speaks_the_documented_wire(fake: FakeGoogleChat, tmp_path: Path) -> None:
    """The fake itself, by plain HTTP (no rousseau code): Google's error body without a
    token, an invalid_grant for an assertion not signed by the key, Chat's certificates, and
    a token of Chat's that verifies against them."""
    import aiohttp
    import google.auth.jwt

    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake.url}/v1/{DM_SPACE}/messages", json={"text": "x"}) as r:
            error = (await r.json())["error"]
            assert r.status == 401 and error["status"] == "UNAUTHENTICATED"
        grant = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "x.y.z"}
        async with http.post(f"{fake.url}/token", data=grant) as r:
            assert r.status == 400 and (await r.json())["error"] == "invalid_grant"
        async with http.get(f"{fake.url}/certs") as r:
            certs = await r.json()
    assert all(pem.startswith("-----BEGIN CERTIFICATE-----") for pem in certs.values())
    claims = google.auth.jwt.decode(fake.token(), certs=certs, audience=PROJECT)
    assert claims["iss"] == "chat@system.gserviceaccount.com"


async def test_without_an_audience_chats_tokens_are_taken_and_the_doctor_says_to_set_it(
    fake: FakeGoogleChat, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/googlechat"
    transport = GoogleChatTransport(
        json.loads(fake.credentials(tmp_path).read_text()),
        audience=None,
        listen=f"127.0.0.1:{port}",
        api_base=fake.url,
        certs_url=f"{fake.url}/certs",
    )
    assert "googlechat.audience is not set" in transport.findings[0]
    event = fake.message(DM_SPACE, OWNER, "hello")
    async with receiving_posts(transport, port) as taken:
        assert (
            await anyio.to_thread.run_sync(fake.post, url, event, fake.token(audience="1")) == 200
        )
        forged = fake.token(forged=True)
        assert await anyio.to_thread.run_sync(fake.post, url, event, forged) == 401
    assert [i.text for i in taken] == ["hello"]
