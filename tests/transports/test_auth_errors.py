"""A credential the platform rejects is a TransportAuthError: one line naming the config key
to fix and never the secret itself (the supervisor stops that transport). A network failure
is a plain TransportError, which the supervisor retries with backoff.

Each adapter is driven through its own wire-level fake, or the real server where the suite
has one (Synapse, Dovecot), as in the conformance suite.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import ssl
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest
from neonize.aioze.events import DisconnectedEv, LoggedOutEv

from rousseau.agent import TransportAuthError, TransportError
from rousseau.messages import Inbound, MemoryKeyValue, Outbound
from rousseau.transports.base import Transport
from rousseau.transports.discord import DiscordTransport
from rousseau.transports.imessage import IMessageTransport
from rousseau.transports.mail import EmailTransport
from rousseau.transports.matrix import MatrixTransport
from rousseau.transports.signal import SignalTransport
from rousseau.transports.slack import SlackTransport
from rousseau.transports.sms import SMSTransport, TwilioSender, VonageSender
from rousseau.transports.telegram import TelegramTransport
from rousseau.transports.whatsapp import WhatsAppTransport, paired_device
from tests.fakes.bluebubbles import FakeBlueBubbles
from tests.fakes.discord import FakeDiscord
from tests.fakes.signal_cli import UNREGISTERED
from tests.fakes.slack import BOT_USER, FakeSlack
from tests.fakes.sms import ACCOUNT_SID, VONAGE_KEY, FakeTwilio, FakeVonage
from tests.fakes.smtp import SMTPSink
from tests.fakes.telegram import FakeTelegram
from tests.fakes.whatsapp import FakeWhatsAppClient
from tests.helpers import free_port, self_signed
from tests.mail.dovecot import Dovecot
from tests.matrix.synapse import Synapse
from tests.transports.harness_signal import SignalHarness

pytestmark = pytest.mark.anyio


async def ignore(inbound: Inbound) -> None:
    pass


async def failure(transport: Transport) -> TransportError:
    """Run the transport until it fails; what it raised (anything else fails the test)."""
    try:
        with anyio.fail_after(30):
            await transport.run(ignore)
    except TransportError as exc:
        return exc
    finally:
        await transport.aclose()
    raise AssertionError("run() returned instead of failing")


def assert_rejected(exc: BaseException, key: str, *secret: str) -> None:
    """A permanent failure: one line naming the key to fix, no secret in it."""
    assert isinstance(exc, TransportAuthError), repr(exc)
    text = str(exc)
    assert text.startswith(key.split(".")[0]) and key in text, text
    assert "\n" not in text, text
    for value in secret:
        assert value not in text, text


def assert_transient(exc: BaseException, name: str) -> None:
    """A failure the supervisor retries: a TransportError, not an auth error."""
    assert isinstance(exc, TransportError) and not isinstance(exc, TransportAuthError), repr(exc)
    assert str(exc).startswith(name), str(exc)


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


async def when_connected(transport: Transport, then: Callable[[], Awaitable[object]]) -> None:
    while not transport.connected:
        await anyio.sleep(0.02)
    await then()


# -- Telegram ----------------------------------------------------------------------------------


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(token="111:right-token").start()
    yield fake
    fake.stop()


async def test_telegram_rejected_token_names_the_key(telegram: FakeTelegram) -> None:
    token = "222:WRONG-SECRET-token"
    exc = await failure(TelegramTransport(token, base_url=telegram.url, poll_timeout=1))
    assert_rejected(exc, "telegram.token", token, "WRONG-SECRET")
    with pytest.raises(TransportError) as caught:
        await TelegramTransport(token, base_url=telegram.url).check()
    assert_rejected(caught.value, "telegram.token", token)


async def test_telegram_token_revoked_while_polling(telegram: FakeTelegram) -> None:
    transport = TelegramTransport(telegram.token, base_url=telegram.url, poll_timeout=1)

    async def revoke() -> None:
        telegram.token = "111:a-new-token"  # as @BotFather's /revoke does

    async with anyio.create_task_group() as tg:
        tg.start_soon(when_connected, transport, revoke)
        exc = await failure(transport)
    assert_rejected(exc, "telegram.token", "111:right-token")
    assert "getUpdates" in telegram.calls


async def test_telegram_unreachable_is_transient() -> None:
    exc = await failure(TelegramTransport("333:SECRET-x", base_url=closed_url()))
    assert_transient(exc, "telegram")
    assert "SECRET-x" not in str(exc)


# -- Slack -------------------------------------------------------------------------------------


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.mark.parametrize(
    "error", ["invalid_auth", "not_authed", "account_inactive", "token_revoked"]
)
@pytest.mark.parametrize("bot_user_id", [None, BOT_USER])
async def test_slack_rejected_bot_token_names_the_key(
    slack: FakeSlack, error: str, bot_user_id: str | None
) -> None:
    slack.auth_error = error
    token = "xoxb-WRONG-SECRET"
    transport = SlackTransport(
        slack.app_token, token, bot_user_id=bot_user_id, base_url=slack.url + "/api/"
    )
    exc = await failure(transport)
    assert_rejected(exc, "slack.bot_token", token)
    assert error in str(exc)


async def test_slack_rejected_app_token_names_the_key(slack: FakeSlack) -> None:
    token = "xapp-1-WRONG-SECRET"
    exc = await failure(SlackTransport(token, slack.bot_token, base_url=slack.url + "/api/"))
    assert_rejected(exc, "slack.app_token", token)


async def test_slack_unreachable_is_transient() -> None:
    transport = SlackTransport("xapp-1-a", "xoxb-b", base_url=closed_url() + "/api/")
    assert_transient(await failure(transport), "slack")


# -- Discord -----------------------------------------------------------------------------------


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


async def test_discord_rejected_token_at_login_names_the_key(discord: FakeDiscord) -> None:
    token = "WRONG-SECRET-discord"
    transport = DiscordTransport(token, api_base=discord.api_base, gateway_url=discord.gateway_url)
    assert_rejected(await failure(transport), "discord.token", token)
    with pytest.raises(TransportError) as caught:
        await transport.check()
    assert_rejected(caught.value, "discord.token", token)


async def test_discord_gateway_closing_4004_names_the_key(discord: FakeDiscord) -> None:
    discord.refuse_identify = True
    transport = DiscordTransport(
        discord.token, api_base=discord.api_base, gateway_url=discord.gateway_url
    )
    exc = await failure(transport)
    assert_rejected(exc, "discord.token", discord.token)
    assert "4004" in str(exc)


async def test_discord_unreachable_is_transient() -> None:
    url = closed_url()
    transport = DiscordTransport("tok", api_base=url + "/api/v10", gateway_url=url + "/gateway")
    assert_transient(await failure(transport), "discord")


# -- Matrix ------------------------------------------------------------------------------------


async def test_matrix_rejected_access_token_names_the_key(synapse: Synapse) -> None:
    user = synapse.register(f"auth{secrets.token_hex(3)}")
    token = "syt_WRONG_SECRET_token"
    transport = MatrixTransport(synapse.url, user["user_id"], access_token=token)
    assert_rejected(await failure(transport), "matrix.access_token", token)


async def test_matrix_rejected_password_names_the_key(synapse: Synapse) -> None:
    user = synapse.register(f"auth{secrets.token_hex(3)}")
    password = "WRONG-SECRET-password"
    transport = MatrixTransport(synapse.url, user["user_id"], password=password)
    assert_rejected(await failure(transport), "matrix.password", password)


async def test_matrix_revoked_saved_session_is_transient_and_logs_in_again(
    synapse: Synapse,
) -> None:
    """A saved login the homeserver forgot is not the config's fault: the next start logs in
    afresh with the configured password."""
    user = synapse.register(f"auth{secrets.token_hex(3)}", "right-password-1")
    state = MemoryKeyValue()
    transport = MatrixTransport(synapse.url, user["user_id"], password="right-password-1")
    transport.bind_state(state)
    await transport.check()  # logs in and keeps the session
    saved = json.loads(state.values["session"])
    synapse.call("POST", "/_matrix/client/v3/logout", {}, token=saved["access_token"])
    assert_transient(await failure(transport), "matrix")
    assert not state.values["session"]
    assert await transport.check() == user["user_id"]


async def test_matrix_unreachable_is_transient() -> None:
    transport = MatrixTransport(closed_url(), "@bot:localhost", access_token="syt_SECRET")
    exc = await failure(transport)
    assert_transient(exc, "matrix")
    assert "syt_SECRET" not in str(exc)


# -- WhatsApp ----------------------------------------------------------------------------------


async def test_whatsapp_logged_out_names_the_way_back() -> None:
    client = FakeWhatsAppClient()
    transport = WhatsAppTransport(client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_connected, transport, lambda: client.emit(LoggedOutEv()))
        exc = await failure(transport)
    assert_rejected(exc, "whatsapp.store")
    assert "rousseau whatsapp login" in str(exc)
    assert_rejected(await failure(transport), "whatsapp.store")  # and it stays so


async def test_whatsapp_disconnect_is_transient() -> None:
    client = FakeWhatsAppClient()
    transport = WhatsAppTransport(client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_connected, transport, lambda: client.emit(DisconnectedEv()))
        exc = await failure(transport)
    assert_transient(exc, "whatsapp")


def test_whatsapp_store_without_a_paired_device(tmp_path: Path) -> None:
    store = tmp_path / "whatsapp.db"
    assert paired_device(str(store)) is None
    assert not store.exists()  # looking did not create it
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE whatsmeow_device (jid TEXT PRIMARY KEY)")
    assert paired_device(str(store)) is None
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO whatsmeow_device VALUES ('15550000000.0:12@s.whatsapp.net')")
    assert paired_device(str(store)) == "15550000000.0:12@s.whatsapp.net"


# -- iMessage (BlueBubbles) --------------------------------------------------------------------


async def test_imessage_rejected_password_names_the_key() -> None:
    server = FakeBlueBubbles().start()
    try:
        password = "WRONG-SECRET-pw"
        exc = await failure(IMessageTransport(server.url, password))
        assert_rejected(exc, "imessage.password", password)
    finally:
        server.stop()


async def test_imessage_unreachable_is_transient() -> None:
    exc = await failure(IMessageTransport(closed_url(), "SECRET-pw"))
    assert_transient(exc, "imessage")
    assert "SECRET-pw" not in str(exc)


# -- Email -------------------------------------------------------------------------------------


async def test_email_rejected_imap_login_names_the_key(dovecot: Dovecot) -> None:
    password = "WRONG-SECRET-mail"
    transport = EmailTransport(
        imap_addr=f"127.0.0.1:{dovecot.port}",
        username=dovecot.add_user(),
        password=password,
        smtp_addr="127.0.0.1:1",
        from_addr="bot@example.org",
        security="plain",
    )
    assert_rejected(await failure(transport), "email.imap_password", password)


async def test_email_rejected_smtp_login_names_the_key(dovecot: Dovecot) -> None:
    user = dovecot.add_user()
    sink = SMTPSink(user, "secret").start()
    try:
        transport = EmailTransport(
            imap_addr=f"127.0.0.1:{dovecot.port}",
            username=user,
            password="secret",
            smtp_addr=f"127.0.0.1:{sink.port}",
            smtp_password="WRONG-SECRET-smtp",
            from_addr="bot@example.org",
            security="plain",
        )
        with pytest.raises(TransportError) as caught:
            await transport.check()
        assert_rejected(caught.value, "email.smtp_password", "WRONG-SECRET-smtp")
        with pytest.raises(TransportError) as caught:
            await transport.send(Outbound(transport="email", chat_id="a@example.org", text="hi"))
        assert_rejected(caught.value, "email.smtp_password", "WRONG-SECRET-smtp")
    finally:
        sink.stop()


async def test_email_unreachable_is_transient() -> None:
    transport = EmailTransport(
        imap_addr=f"127.0.0.1:{free_port()}",
        username="bot",
        password="SECRET-mail",
        smtp_addr="127.0.0.1:1",
        from_addr="bot@example.org",
        security="plain",
        timeout=5,
    )
    assert_transient(await failure(transport), "email")


# -- SMS ---------------------------------------------------------------------------------------


def text_to(number: str) -> Outbound:
    return Outbound(transport="sms", chat_id=number, text="hi")


async def test_sms_twilio_rejected_credentials_name_the_key() -> None:
    server = FakeTwilio().start()
    transport = SMSTransport(
        TwilioSender(ACCOUNT_SID, "WRONG-SECRET-twilio", "+15550000000", base_url=server.url)
    )
    try:
        with pytest.raises(TransportError) as caught:
            await transport.send(text_to("+15551230001"))
        assert_rejected(caught.value, "sms.auth_token", "WRONG-SECRET-twilio")
        with pytest.raises(TransportError) as caught:
            await transport.check()
        assert_rejected(caught.value, "sms.auth_token", "WRONG-SECRET-twilio")
    finally:
        await transport.aclose()
        server.stop()


async def test_sms_vonage_rejected_credentials_name_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    self_signed(cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # trust the fake, as a proxy's CA
    server = FakeVonage(context).start()
    sender = VonageSender(VONAGE_KEY, "WRONG-SECRET-vonage", "Rousseau", base_url=server.url)
    transport = SMSTransport(sender)
    try:
        with pytest.raises(TransportError) as caught:
            await transport.send(text_to("447700900000"))
        assert_rejected(caught.value, "sms.api_secret", "WRONG-SECRET-vonage")
        with pytest.raises(TransportError) as caught:
            await transport.check()
        assert_rejected(caught.value, "sms.api_secret", "WRONG-SECRET-vonage")
    finally:
        await transport.aclose()
        server.stop()


async def test_sms_unreachable_is_transient() -> None:
    transport = SMSTransport(
        TwilioSender(ACCOUNT_SID, "SECRET-twilio", "+15550000000", base_url=closed_url())
    )
    try:
        with pytest.raises(TransportError) as caught:
            await transport.send(text_to("+15551230001"))
        assert_transient(caught.value, "sms")
    finally:
        await transport.aclose()


# -- Signal ------------------------------------------------------------------------------------


@pytest.fixture
def signal_cli() -> Iterator[Path]:
    harness = SignalHarness()
    yield harness.binary
    harness.close()


async def test_signal_unregistered_account_names_the_key(signal_cli: Path) -> None:
    exc = await failure(SignalTransport(UNREGISTERED, binary=str(signal_cli)))
    assert_rejected(exc, "signal.account")
    assert UNREGISTERED in str(exc)


async def test_signal_cli_missing_is_transient(tmp_path: Path) -> None:
    exc = await failure(SignalTransport("+15550000000", binary=str(tmp_path / "nothing")))
    assert_transient(exc, "signal")
