"""IRC end to end against a real ngIRCd on 127.0.0.1: private messages, channel lines only
when the bot is named, strangers kept out, a 9,000-character answer whole and in order in
lines the server relays uncut, and the link coming back after the server restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.transports import build_transports
from rousseau.transports.mention import names
from tests.helpers import until
from tests.irc.ngircd import Ngircd
from tests.irc.person import Person

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i:04d}" for i in range(1001))  # 9,008 characters
assert len(LONG) >= 9000


def answer(request: Request) -> Response:
    text = request.messages[-1].text
    return text_reply(LONG if "long" in text else f"echo: {text}")


@asynccontextmanager
async def bot(server: Ngircd, tmp: Path, nick: str, owner: str) -> AsyncIterator[FunctionProvider]:
    (tmp / "config.yaml").write_text(
        "irc:\n"
        "  server: 127.0.0.1\n"
        f"  port: {server.tls_port}\n"
        "  tls: true\n"
        "  tls_verify: false\n"
        f"  nick: {nick}\n"
        "  channels: ['#room']\n"
        "  line_interval: 50ms\n"
        f"  allowlist: [{owner}]\n"
    )
    config = load_config(
        str(tmp / "config.yaml"),
        {
            "HOME": str(tmp),
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
            while not transports["irc"].connected:
                await anyio.sleep(0.05)
        yield provider
        daemon.stop()


async def test_private_channel_stranger_and_a_long_answer(ngircd: Ngircd, tmp_path: Path) -> None:
    alice = await anyio.to_thread.run_sync(Person, ngircd.port, "alice_t1")
    eve = await anyio.to_thread.run_sync(Person, ngircd.port, "eve_t1")
    await anyio.to_thread.run_sync(alice.join, "#room")
    try:
        async with bot(ngircd, tmp_path, "rbot_t1", "alice_t1") as provider:
            await anyio.to_thread.run_sync(
                alice.wait_line, lambda line: line.startswith(":rbot_t1!") and " JOIN " in line
            )
            eve.say("rbot_t1", "let me in")
            alice.say("rbot_t1", "hello")
            await until(lambda: alice.from_("rbot_t1") == [("alice_t1", "echo: hello")], 20)
            alice.say("#room", "just chatting")
            alice.say("#room", "rbot_t1: are you there?")
            await until(lambda: len(alice.from_("rbot_t1")) == 2, 20)
            target, said = alice.from_("rbot_t1")[1]
            assert target == "#room" and said.endswith("are you there?")
            assert eve.from_("rbot_t1") == [] and len(provider.requests) == 2

            alice.say("rbot_t1", "something long please")
            await until(lambda: " ".join(t for _, t in alice.from_("rbot_t1")[2:]) == LONG, 20)
        lines = [line for line in alice.lines if line.startswith(":rbot_t1!")]
        assert all(len(line.encode()) <= 510 for line in lines)  # relayed whole, never cut
        assert not any(line.endswith("[CUT]") for line in lines)
        assert len(alice.from_("rbot_t1")) - 2 >= 20  # split into lines, not one cut line
    finally:
        alice.close()
        eve.close()


async def test_the_link_comes_back_after_the_server_restarts(
    own_ngircd: Ngircd, tmp_path: Path
) -> None:
    async with bot(own_ngircd, tmp_path, "rbot_t2", "alice_t2"):
        await anyio.to_thread.run_sync(own_ngircd.stop)
        await anyio.to_thread.run_sync(own_ngircd.start)
        alice = await anyio.to_thread.run_sync(Person, own_ngircd.port, "alice_t2")
        await anyio.to_thread.run_sync(alice.join, "#room")
        try:
            # Back: it joins #room again, and answers (after the supervisor's backoff, which
            # on a loaded machine may take a few tries while the server comes up).
            await anyio.to_thread.run_sync(
                lambda: alice.wait_line(
                    lambda ln: ln.startswith(":rbot_t2!") and " JOIN " in ln, 60
                )
            )
            alice.say("rbot_t2", "welcome back")
            await until(lambda: alice.from_("rbot_t2") == [("alice_t2", "echo: welcome back")], 20)
        finally:
            alice.close()


def test_a_channel_line_names_the_bot_only_by_its_whole_nick() -> None:
    assert names("rbot: hi", "rbot") and names("hi RBot!", "rbot")
    assert not names("rbots are fun", "rbot") and not names("xrbot", "rbot")
    assert names("xrbot, or rbot: you", "rbot") and not names("anything", "")


def test_a_transport_never_run_leaves_nothing_open() -> None:
    """Its queue exists only while it runs: one made and dropped (doctor, `send`) leaves no
    stream for the garbage collector to warn about in some later test."""
    import gc
    import warnings

    from rousseau.transports.irc import IRCTransport

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        IRCTransport("127.0.0.1", "rbot_t3")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


async def test_a_line_with_a_nul_is_taken_repaired_as_every_transport_repairs_one() -> None:
    """A NUL in a line (pydle hands over what the socket said) is replaced, as every other
    transport's checked messages are, before the store sees it."""
    from pydle.features.rfc1459.parsing import RFC1459Message

    from rousseau.messages import Inbound
    from rousseau.transports.irc import IRCTransport

    transport = IRCTransport("127.0.0.1", "rbot_t4")
    transport._client = transport._client_for()
    send, taken = anyio.create_memory_object_stream[Inbound](10)
    transport._inbox = send
    with send, taken:
        transport._take(RFC1459Message("PRIVMSG", ["rbot_t4", "bad\x00line"], source="al!a@h"))
        transport._take(RFC1459Message("PRIVMSG", ["rbot_t4", "good line"], source="al!a@h"))
        assert [taken.receive_nowait().text for _ in range(2)] == ["bad\ufffdline", "good line"]
