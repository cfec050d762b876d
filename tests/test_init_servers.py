"""`rousseau init` for Matrix and email against the real servers of the test session
(Synapse, Dovecot): from no config to the owner answered by `rousseau run`."""

from __future__ import annotations

import itertools
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rousseau.config import load_config
from tests.fakes.llm import FakeLLMServer
from tests.fakes.smtp import SMTPSink
from tests.init_support import Running, init_env, start_init, written
from tests.mail.dovecot import Dovecot
from tests.matrix.synapse import Synapse
from tests.transports.harness_email import _plain, mail

_txn = itertools.count(1)


@pytest.fixture
def env(tmp_path: Path, fake_llm: FakeLLMServer) -> dict[str, str]:
    return init_env(tmp_path, fake_llm)


def say(synapse: Synapse, who: dict[str, Any], room: str, text: str) -> None:
    path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/send/m.room.message/"
    body = {"msgtype": "m.text", "body": text}
    synapse.call("PUT", f"{path}init{next(_txn)}", body, token=who["access_token"])


def said_by(synapse: Synapse, who: dict[str, Any], room: str, author: str) -> list[str]:
    """What `author` said in `room`, oldest first, as `who` reads it."""
    path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/messages?dir=b&limit=50"
    events = synapse.call("GET", path, token=who["access_token"])["chunk"]
    return [
        e["content"].get("body", "")
        for e in reversed(events)
        if e["type"] == "m.room.message" and e["sender"] == author
    ]


def joined(synapse: Synapse, who: dict[str, Any], room: str) -> set[str]:
    path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/joined_members"
    return set(synapse.call("GET", path, token=who["access_token"])["joined"])


def until(check: Callable[[], object], shows: Callable[[], str] = str) -> None:
    """Wait until `check()` is true; when it never is, fail showing `shows()`."""
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, shows()
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_matrix_logs_in_and_admits_whoever_opens_a_direct_chat(
    tmp_path: Path, env: dict[str, str], synapse: Synapse, fake_llm: FakeLLMServer
) -> None:
    tag = secrets.token_hex(3)
    bot = synapse.register(f"initbot{tag}", "bot-password-123")
    owner = synapse.register(f"initowner{tag}")
    term = start_init(env)
    term.expect("Choose [telegram]: ")
    term.type("matrix")
    term.expect("Homeserver address [https://matrix.org]: ")
    term.type(synapse.url)
    term.expect("The bot's user id (@name:server): ")
    term.type(bot["user_id"])
    term.expect("The bot's password (input hidden): ")
    term.type("not-the-password")
    term.expect("FAIL  matrix")
    term.expect(f"Homeserver address [{synapse.url}]: ")
    term.type("")
    term.expect(f"[{bot['user_id']}]: ")
    term.type("")
    term.expect("The bot's password (input hidden): ")
    term.type("bot-password-123")
    term.expect(f"ok    matrix: {bot['user_id']}")
    term.expect("Waiting up to")
    room = synapse.call(
        "POST",
        "/_matrix/client/v3/createRoom",
        {"invite": [bot["user_id"]], "preset": "trusted_private_chat", "is_direct": True},
        token=owner["access_token"],
    )["room_id"]
    until(lambda: bot["user_id"] in joined(synapse, owner, room))
    say(synapse, owner, room, "it's me")
    term.expect(owner["user_id"])
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("y")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    assert "bot-password-123" not in term.output

    config = load_config(str(written(tmp_path)), {})
    assert config.matrix is not None and config.matrix.allowlist == [owner["user_id"]]
    assert config.matrix.homeserver_url == synapse.url
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"matrix:{owner['user_id']}"]

    daemon = Running(env, tmp_path)
    try:
        daemon.wait_log("matrix.connected")
        say(synapse, owner, room, "are you there?")
        until(lambda: said_by(synapse, owner, room, bot["user_id"]), daemon.said)
        assert said_by(synapse, owner, room, bot["user_id"]) == ["echo: are you there?"]
        assert [r.body["messages"][-1]["content"] for r in fake_llm.posts()] == ["are you there?"]
    finally:
        daemon.stop()


@pytest.fixture
def mailbox(dovecot: Dovecot) -> Iterator[tuple[str, SMTPSink]]:
    user = dovecot.add_user()
    sink = SMTPSink(user, "secret").start()
    yield user, sink
    sink.stop()


@pytest.mark.timeout(240)
def test_email_checks_imap_and_smtp_and_admits_the_sender_of_the_first_new_mail(
    tmp_path: Path,
    env: dict[str, str],
    dovecot: Dovecot,
    mailbox: tuple[str, SMTPSink],
    fake_llm: FakeLLMServer,
) -> None:
    user, smtp = mailbox
    address, owner = f"{user}@example.org", "ann@example.org"
    waiting = mail("friend@example.org", [address], "unread before set-up", message_id="<old@x>")
    dovecot.deliver(user, bytes(waiting))
    term = start_init(env)
    term.expect("Choose [telegram]: ")
    term.type("email")
    term.expect("IMAP server (host:port): ")
    term.type(f"127.0.0.1:{dovecot.port}")
    term.expect("IMAP user name: ")
    term.type(user)
    term.expect("IMAP password (input hidden): ")
    term.type("not-the-password")
    term.expect("SMTP server (host:port): ")
    term.type(f"127.0.0.1:{smtp.port}")
    term.expect("The bot's address: ")
    term.type(user)
    term.expect("it has a @ in it")
    term.expect("The bot's address: ")
    term.type(address)
    term.expect("Security: tls, starttls or plain [tls]: ")
    term.type("plain")
    term.expect("FAIL  email: IMAP login failed")
    for _ in range(2):  # the IMAP address and user: as given
        term.expect("]: ")
        term.type("")
    term.expect("IMAP password (input hidden): ")
    term.type("secret")
    for _ in range(3):  # SMTP, the address, the security: as given
        term.expect("]: ")
        term.type("")
    term.expect(f"ok    email: {address}")
    term.expect(f"Now send a mail to {address}")
    term.expect("Waiting up to")
    stranger = mail("mallory@example.org", [address], "let me in", message_id="<no@x>")
    dovecot.deliver(user, bytes(stranger))
    term.expect("Mail from mallory@example.org.")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("n")
    term.expect("Waiting for another mail")
    dovecot.deliver(user, bytes(mail(f"Ann <{owner}>", [address], "me", message_id="<me@x>")))
    term.expect(f"Mail from Ann <{owner}>.")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("y")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output

    flags = dovecot.flags(user)
    assert b"\\Seen" in flags["<me@x>"]  # taken: the daemon does not answer it
    assert b"\\Seen" not in flags["<old@x>"] and b"\\Seen" not in flags["<no@x>"]
    config = load_config(str(written(tmp_path)), {})
    assert config.email is not None and config.email.allowlist == [owner]
    assert config.email.tls == "plain" and config.email.from_ == address
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"email:{owner}"]

    daemon = Running(env, tmp_path)
    try:
        dovecot.deliver(user, bytes(mail(owner, [address], "are you there?")))
        until(smtp.messages, daemon.said)
        [answer] = smtp.messages()
        assert answer["To"] == owner and _plain(answer) == "echo: are you there?"
        assert [r.body["messages"][-1]["content"] for r in fake_llm.posts()] == ["are you there?"]
    finally:
        daemon.stop()
