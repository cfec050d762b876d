"""Teams beyond the conformance suite, against the fake Teams: a post without the Bot
Framework's token for this bot (forged, expired, for another bot, from another issuer, for
another service URL, or none) is refused and reaches nobody; approvals come as an Adaptive
Card whose buttons answer; a conversation once seen can be written to later (cron, alerts);
refused credentials name the setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import ConfigError, TransportAuthError
from rousseau.messages import Inbound, Outbound
from rousseau.transports.teams import TeamsTransport
from tests.fakes.teams import APP_ID, CHANNEL, OWNER, PASSWORD, PERSONAL, FakeTeams
from tests.helpers import build_from, free_port, receiving_posts

pytestmark = pytest.mark.anyio


async def ignore(inbound: Inbound) -> None:
    pass


@pytest.fixture
def fake() -> Iterator[FakeTeams]:
    server = FakeTeams().start()
    yield server
    server.stop()


def transport_for(fake: FakeTeams, port: int, password: str = PASSWORD) -> TeamsTransport:
    return TeamsTransport(
        APP_ID,
        password,
        listen=f"127.0.0.1:{port}",
        login_endpoint=fake.url,
        keys_url=fake.keys_url,
        service_url=fake.url,  # the global Bot Connector, for conversations not heard from
    )


async def test_only_the_bot_frameworks_tokens_for_this_bot_are_taken(fake: FakeTeams) -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/api/messages"
    activity = fake.message(PERSONAL, OWNER, "let me in")
    refusals = {
        "forged": fake.token(forged=True),
        "expired": fake.token(age=7200),
        "another bot": fake.token(audience="99999999-0000-4000-8000-000000000000"),
        "another issuer": fake.token(issuer="https://login.example.org"),
        "another service": fake.token(service_url="https://elsewhere.example.org"),
        "no token": "",
        "garbage": "not.a.token",
    }
    with capture_logs() as logs:
        async with receiving_posts(transport_for(fake, port), port) as taken:
            for why, token in refusals.items():
                status = await anyio.to_thread.run_sync(fake.post, endpoint, activity, token)
                assert status == 401, why
            assert await anyio.to_thread.run_sync(fake.post, endpoint, activity) == 200
    assert [i.text for i in taken] == ["let me in"]  # the refused posts reached nobody
    assert len([e for e in logs if e["event"] == "teams.post_refused"]) == len(refusals)


async def test_answers_come_as_a_card_and_a_press_as_a_message(fake: FakeTeams) -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/api/messages"
    transport = transport_for(fake, port)
    async with receiving_posts(transport, port) as taken:
        hello = fake.message(PERSONAL, OWNER, "hello")
        assert await anyio.to_thread.run_sync(fake.post, endpoint, hello) == 200
        question = Outbound(
            transport="teams",
            chat_id=PERSONAL,
            text="Approve bash? [K7QD]",
            buttons=("yes K7QD", "no K7QD"),
        )
        await transport.send(question)
        [sent] = fake.messages()
        [card] = sent.attachments
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        actions = card["content"]["actions"]
        assert [a["title"] for a in actions] == ["yes K7QD", "no K7QD"]
        press = fake.message(PERSONAL, OWNER, "", value=actions[0]["data"])
        assert await anyio.to_thread.run_sync(fake.post, endpoint, press) == 200
    assert [(i.text, i.sender_id) for i in taken] == [("hello", OWNER), ("yes K7QD", OWNER)]


async def test_a_conversation_is_written_to_unasked_and_in_its_thread(
    fake: FakeTeams,
) -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/api/messages"
    transport = transport_for(fake, port)
    # Before anyone wrote there: through the global Bot Connector address.
    await transport.send(Outbound(transport="teams", chat_id=CHANNEL, text="good morning"))
    async with receiving_posts(transport, port) as taken:
        asked = fake.message(CHANNEL, OWNER, "what is up?", mention=True)
        assert await anyio.to_thread.run_sync(fake.post, endpoint, asked) == 200
        [inbound] = taken
        assert inbound.text == "what is up?" and inbound.mentioned and inbound.is_group
        reply = Outbound(
            transport="teams", chat_id=inbound.chat_id, thread_id=inbound.thread_id, text="hi"
        )
        await transport.send(reply)
        later = Outbound(transport="teams", chat_id=CHANNEL, text="the daily report")
        await transport.send(later)  # as cron delivers: no message to answer
    early, first, second = fake.messages()
    assert (early.chat, early.thread, early.text) == (CHANNEL, None, "good morning")
    assert (first.chat, first.thread, first.text) == (CHANNEL, asked["id"], "hi")
    assert (second.chat, second.thread, second.text) == (CHANNEL, None, "the daily report")


async def test_refused_credentials_name_the_setting(fake: FakeTeams) -> None:
    transport = transport_for(fake, free_port(), password="wrong")
    with pytest.raises(TransportAuthError, match=r"^teams\.app_password: Entra refused"):
        await transport.check()
    with pytest.raises(TransportAuthError, match=r"^teams\.app_password"):
        await transport.run(ignore)
    assert await transport_for(fake, free_port()).check() == f"app {APP_ID}"


def test_a_section_without_what_it_needs_names_the_key(tmp_path: Path) -> None:
    from rousseau.cli.doctor import SENDER_SHAPES

    with pytest.raises(ConfigError, match=r"^teams\.app_id: not set"):
        build_from(tmp_path, "teams:\n  app_password: x\n")
    with pytest.raises(ConfigError, match=r"^teams\.app_password: not set; set it or TEAMS_APP"):
        build_from(tmp_path, f"teams:\n  app_id: {APP_ID}\n")
    shape, _ = SENDER_SHAPES["teams"]
    assert shape.match(OWNER) and not shape.match("alice@example.org")


async def test_the_fake_speaks_the_documented_wire(fake: FakeTeams) -> None:
    """The fake itself, by plain HTTP (no rousseau code): Entra's error body for a wrong
    secret, a token for the right one, the Bot Connector's 401 without it, the JWKS with
    the msteams endorsement, and a token that verifies against that JWKS."""
    import aiohttp
    import jwt

    form = {
        "grant_type": "client_credentials",
        "client_id": APP_ID,
        "client_secret": "wrong",
        "scope": "https://api.botframework.com/.default",
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake.url}/tenant/oauth2/v2.0/token", data=form) as r:
            error = await r.json()
            assert r.status == 401 and error["error"] == "invalid_client"
            assert error["error_description"].startswith("AADSTS7000215")
        async with http.post(
            f"{fake.url}/tenant/oauth2/v2.0/token", data={**form, "client_secret": PASSWORD}
        ) as r:
            granted = await r.json()
            assert granted["token_type"] == "Bearer" and granted["expires_in"] > 0
        async with http.post(f"{fake.url}/v3/conversations/x/activities", json={}) as r:
            assert r.status == 401
        async with http.get(fake.keys_url) as r:
            [key] = (await r.json())["keys"]
    assert key["kty"] == "RSA" and "msteams" in key["endorsements"]
    signing = jwt.PyJWK(key).key
    claims = jwt.decode(fake.token(), signing, algorithms=["RS256"], audience=APP_ID)
    assert claims["iss"] == "https://api.botframework.com" and claims["serviceurl"] == fake.url


async def test_a_429_from_the_connector_is_waited_out(fake: FakeTeams, tmp_path: Path) -> None:
    """The 429 ends the send with Throttled; the outbox sends again when the Connector said."""
    from rousseau.agent import Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply
    from tests.helpers import config_in, serving, until

    def echo(request: Request) -> Response:
        return text_reply("echo: " + request.messages[-1].text)

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/api/messages"
    transport = transport_for(fake, port)
    async with serving(transport, config_in(tmp_path), FunctionProvider(echo), [OWNER]):
        fake.limited = 1  # the next message activity (typing passes)
        hello = fake.message(PERSONAL, OWNER, "hello")
        assert await anyio.to_thread.run_sync(fake.post, endpoint, hello) == 200
        await until(lambda: bool(fake.messages()), 20)
        await anyio.sleep(0.5)
    assert [p.text for p in fake.messages()] == ["echo: hello"] and fake.limited == 0


async def test_a_declined_file_is_not_uploaded(fake: FakeTeams, tmp_path: Path) -> None:
    from rousseau.agent import Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
    from tests.helpers import config_in, serving

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "table.csv").write_bytes(b"a,b\n1,2\n")
    port = free_port()
    fake.bot_endpoint = f"http://127.0.0.1:{port}/api/messages"
    fake.consent = "decline"

    def answer(request: Request) -> Response:
        if request.messages[-1].tool_results:
            return text_reply("Here it is.")
        return tool_reply("send_file", path="table.csv")

    config = config_in(tmp_path, ROUSSEAU_AGENT_APPROVER_MODE="allow_all")
    async with serving(transport_for(fake, port), config, FunctionProvider(answer), [OWNER]):
        hello = fake.message(PERSONAL, OWNER, "the table please")
        assert await anyio.to_thread.run_sync(fake.post, fake.bot_endpoint, hello) == 200
        with anyio.fail_after(20):
            while len(fake.messages()) < 2:
                await anyio.sleep(0.05)
        await anyio.sleep(1)  # time for an upload that must not come
    cards = [a for p in fake.messages() for a in p.attachments]
    assert [a["contentType"] for a in cards] == [
        "application/vnd.microsoft.teams.card.file.consent"
    ]
    assert fake.uploads == {}
