"""XMPP end to end against a real Prosody on 127.0.0.1: direct chats answered with a receipt
where asked, room lines only when the bot is named, strangers kept out (also one who takes
the owner's nick in a room), a 9,000-character answer whole, a message sent while the bot
was away answered when it comes, the stream back after the server restarts, and a wrong
password stopping the transport in one line."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response, TransportAuthError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.transports import build_transports
from rousseau.transports.xmpp import XMPPTransport
from tests.helpers import build_from, until
from tests.xmpp.person import CLIENT, Person
from tests.xmpp.prosody import ROOMS, Prosody

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i:04d}" for i in range(1001))  # 9,008 characters
assert len(LONG) >= 9000
PEOPLE = "people-password"


def answer(request: Request) -> Response:
    text = request.messages[-1].text
    return text_reply(LONG if "long" in text else f"echo: {text}")


class Accounts:
    """The bot, its owner and a stranger, registered on the server under names of this test."""

    def __init__(self, server: Prosody) -> None:
        tag = secrets.token_hex(3)
        self.bot = server.register(f"bot{tag}", "bot-password")
        self.owner = server.register(f"alice{tag}", PEOPLE)
        self.stranger = server.register(f"eve{tag}", PEOPLE)
        self.room = f"room{tag}@{ROOMS}"

    def person(self, server: Prosody, jid: str) -> Person:
        return Person(server.port, jid.partition("@")[0], PEOPLE)


@asynccontextmanager
async def bot(
    server: Prosody, tmp: Path, accounts: Accounts, nick: str = "rbot"
) -> AsyncIterator[FunctionProvider]:
    (tmp / "config.yaml").write_text(
        "xmpp:\n"
        f"  jid: {accounts.bot}\n"
        f"  server: 127.0.0.1:{server.port}\n"
        "  tls: starttls\n"
        "  tls_verify: false\n"  # the test server's certificate is self-signed
        f"  rooms: ['{accounts.room}']\n"
        f"  nick: {nick}\n"
        f"  allowlist: [{accounts.owner}]\n"
    )
    config = load_config(
        str(tmp / "config.yaml"),
        {
            "HOME": str(tmp),
            "XMPP_PASSWORD": "bot-password",
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        },
    )
    transports = build_transports(config)
    provider = FunctionProvider(answer)
    daemon = Daemon(config, transports=transports, provider=provider)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(20):
            while not transports["xmpp"].connected:
                await anyio.sleep(0.05)
        yield provider
        daemon.stop()


def from_bot(person: Person, accounts: Accounts, nick: str = "rbot") -> list[tuple[str, str]]:
    """(where, text) of what the bot said to `person`: directly, or in the room."""
    said = person.messages(
        lambda sender: sender.startswith(f"{accounts.bot}/") or sender == f"{accounts.room}/{nick}"
    )
    return [("room" if s.kind == "groupchat" else "direct", s.body) for s in said]


def in_room(person: Person, accounts: Accounts, nick: str = "rbot") -> bool:
    """Whether `person` has seen the bot come into the room."""
    with person.lock:
        return any(
            s.tag == f"{CLIENT}presence"
            and s.get("from") == f"{accounts.room}/{nick}"
            and s.get("type") != "unavailable"
            for s in person.stanzas
        )


async def test_direct_room_strangers_receipts_and_a_long_answer(
    prosody: Prosody, tmp_path: Path
) -> None:
    accounts = Accounts(prosody)
    alice = await anyio.to_thread.run_sync(accounts.person, prosody, accounts.owner)
    eve = await anyio.to_thread.run_sync(accounts.person, prosody, accounts.stranger)
    try:
        await anyio.to_thread.run_sync(alice.join, accounts.room, "alice")
        async with bot(prosody, tmp_path, accounts) as provider:
            await until(lambda: in_room(alice, accounts), 20)
            eve.say(accounts.bot, "let me in")
            asked = alice.say(accounts.bot, "hello", receipt=True)
            await until(lambda: from_bot(alice, accounts) == [("direct", "echo: hello")], 20)
            await until(lambda: asked in alice.receipts(), 10)

            alice.say(accounts.room, "just chatting", room=True)
            alice.say(accounts.room, "rbot: are you there?", room=True)
            await until(lambda: len(from_bot(alice, accounts)) == 2, 20)
            where, said = from_bot(alice, accounts)[1]
            assert where == "room" and said.endswith("are you there?")

            # A stranger in the room, even under the owner's nick, is not the owner.
            await anyio.to_thread.run_sync(eve.join, accounts.room, "alice2")
            eve.say(accounts.room, "rbot: do what I say", room=True)
            alice.say(accounts.bot, "something long please")
            await until(lambda: len(from_bot(alice, accounts)) == 3, 20)
            assert from_bot(alice, accounts)[2] == ("direct", LONG)
            assert from_bot(eve, accounts) == [] and len(provider.requests) == 3
    finally:
        alice.close()
        eve.close()


async def test_what_was_sent_while_away_is_answered_and_the_stream_comes_back(
    own_prosody: Prosody, tmp_path: Path
) -> None:
    accounts = Accounts(own_prosody)
    alice = await anyio.to_thread.run_sync(accounts.person, own_prosody, accounts.owner)
    alice.say(accounts.bot, "are you awake?")  # the bot is not connected yet
    try:
        async with bot(own_prosody, tmp_path, accounts):
            awake = [("direct", "echo: are you awake?")]
            await until(lambda: from_bot(alice, accounts) == awake, 20)
            alice.close()
            await anyio.to_thread.run_sync(own_prosody.stop)
            await anyio.to_thread.run_sync(own_prosody.start)
            alice = await anyio.to_thread.run_sync(accounts.person, own_prosody, accounts.owner)
            await anyio.to_thread.run_sync(alice.join, accounts.room, "alice")
            await until(
                lambda: in_room(alice, accounts), 60
            )  # back (after the backoff), in its room
            alice.say(accounts.bot, "welcome back")
            await until(lambda: ("direct", "echo: welcome back") in from_bot(alice, accounts), 20)
    finally:
        alice.close()


async def test_a_wrong_password_is_named(prosody: Prosody) -> None:
    accounts = Accounts(prosody)
    transport = XMPPTransport(
        accounts.bot, "not-the-password", server=f"127.0.0.1:{prosody.port}", tls_verify=False
    )
    with pytest.raises(TransportAuthError, match=r"^xmpp\.password: the server refused"):
        await transport.check()
    transport.password = "bot-password"
    assert await transport.check() == f"{accounts.bot} on 127.0.0.1:{prosody.port}"


def test_a_section_without_what_it_needs_names_the_key(tmp_path: Path) -> None:
    from rousseau.agent import ConfigError

    def built(section: str) -> None:
        build_from(tmp_path, f"xmpp:\n{section}")

    with pytest.raises(ConfigError, match=r"^xmpp\.jid: not set"):
        built("  password: x\n")
    with pytest.raises(ConfigError, match=r"^xmpp\.password: not set; set it or XMPP_PASSWORD"):
        built("  jid: bot@example.org\n")
    with pytest.raises(ConfigError, match=r"^xmpp\.server: 'example.org:abc' is not"):
        built("  jid: bot@example.org\n  password: x\n  server: example.org:abc\n")


def test_the_doctor_knows_an_address_from_an_address_with_a_resource() -> None:
    from rousseau.cli.doctor import SENDER_SHAPES

    shape, _ = SENDER_SHAPES["xmpp"]
    assert shape.match("you@example.org")
    assert not shape.match("you@example.org/phone") and not shape.match("you")
