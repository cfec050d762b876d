"""SMS: the real Twilio and Vonage SDKs against fake APIs, and Twilio's signed webhook."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from twilio.request_validator import RequestValidator

from rousseau.agent import Request, Response, TransportAuthError
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.messages import Outbound
from rousseau.transports import build_transports
from rousseau.transports.sms import Sender, SMSError, SMSTransport, TwilioSender, VonageSender
from tests.fakes.sms import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    VONAGE_KEY,
    VONAGE_SECRET,
    FakeTwilio,
    FakeVonage,
)
from tests.helpers import self_signed, serving

pytestmark = pytest.mark.anyio
OWNER = "+15551230001"


@pytest.fixture
def twilio() -> Iterator[FakeTwilio]:
    server = FakeTwilio().start()
    yield server
    server.stop()


@pytest.fixture
def vonage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeVonage]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    self_signed(cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # trust the fake, as a proxy's CA
    server = FakeVonage(context).start()
    yield server
    server.stop()


def twilio_sender(server: FakeTwilio, token: str = AUTH_TOKEN) -> TwilioSender:
    return TwilioSender(ACCOUNT_SID, token, "+15550000000", base_url=server.url, poll=0.01)


def out(to: str, text: str = "hello") -> Outbound:
    return Outbound(transport="sms", chat_id=to, text=text)


@pytest.fixture
async def closing() -> AsyncIterator[list[SMSTransport]]:
    """Transports to close after the test (their pooled connections)."""
    made: list[SMSTransport] = []
    yield made
    for transport in made:
        await transport.aclose()


def sms(closing: list[SMSTransport], sender: Sender, **options: Any) -> SMSTransport:
    transport = SMSTransport(sender, **options)
    closing.append(transport)
    return transport


async def test_twilio_send_waits_for_the_delivery_status(
    twilio: FakeTwilio, closing: list[SMSTransport]
) -> None:
    transport = sms(closing, twilio_sender(twilio))
    await transport.send(out(OWNER, "Your report is ready"))
    [sent] = twilio.sent
    assert (sent["To"], sent["From"], sent["Body"]) == (
        OWNER,
        "+15550000000",
        "Your report is ready",
    )
    assert twilio.fetches == 2  # queued -> sending -> sent: the status was followed


async def test_twilio_failed_status_is_a_clear_error(
    twilio: FakeTwilio, closing: list[SMSTransport]
) -> None:
    twilio.failing.add(OWNER)
    transport = sms(closing, twilio_sender(twilio))
    with pytest.raises(SMSError, match=r"undelivered \(error 30003: Unreachable destination"):
        await transport.send(out(OWNER))


async def test_twilio_refusal_and_bad_credentials(
    twilio: FakeTwilio, closing: list[SMSTransport]
) -> None:
    transport = sms(closing, twilio_sender(twilio))
    with pytest.raises(SMSError, match=r"HTTP 400 error 21211"):
        await transport.send(out("12345"))
    with pytest.raises(TransportAuthError, match=r"^sms\.auth_token: .*HTTP 401 error 20003"):
        await sms(closing, twilio_sender(twilio, "wrong")).send(out(OWNER))
    assert "Test account" in await transport.check()


async def test_vonage_send_and_failure(vonage: FakeVonage, closing: list[SMSTransport]) -> None:
    sender = VonageSender(VONAGE_KEY, VONAGE_SECRET, "Rousseau", base_url=vonage.url)
    transport = sms(closing, sender)
    await transport.send(out("447700900000", "Grüße"))
    [sent] = vonage.sent
    assert (sent["to"], sent["from"], sent["text"], sent["type"]) == (
        "447700900000",
        "Rousseau",
        "Grüße",
        "unicode",
    )
    vonage.failing.add("447700900001")
    with pytest.raises(SMSError, match="Unroutable message"):
        await transport.send(out("447700900001"))
    bad = sms(closing, VonageSender(VONAGE_KEY, "wrong", "Rousseau", base_url=vonage.url))
    with pytest.raises(TransportAuthError, match=r"^sms\.api_secret: .*Bad Credentials"):
        await bad.send(out("447700900000"))
    assert "balance 10.5" in await transport.check()


def test_config_builds_each_provider_and_names_what_is_missing(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "ROUSSEAU_SMS_FROM": "+15550000000"}
    twilio = load_config(
        None, {**env, "ROUSSEAU_SMS_ACCOUNT_SID": ACCOUNT_SID, "TWILIO_AUTH_TOKEN": "t"}
    )
    assert isinstance(build_transports(twilio)["sms"], SMSTransport)
    from rousseau.agent import ConfigError

    with pytest.raises(ConfigError, match="sms: set api_key and api_secret"):
        build_transports(load_config(None, {**env, "ROUSSEAU_SMS_PROVIDER": "vonage"}))
    vonage = {**env, "ROUSSEAU_SMS_PROVIDER": "vonage", "ROUSSEAU_SMS_API_KEY": "k"}
    with pytest.raises(ConfigError, match="https only"):
        build_transports(
            load_config(
                None,
                {**vonage, "VONAGE_API_SECRET": "s", "ROUSSEAU_SMS_BASE_URL": "http://x"},
            )
        )


# -- the webhook, through the daemon -------------------------------------------------------


async def post_webhook(url: str, form: dict[str, str], signature: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=form, headers={"X-Twilio-Signature": signature}) as response,
    ):
        return response.status


async def test_webhook_takes_signed_messages_and_answers_by_api(
    twilio: FakeTwilio, tmp_path: Path
) -> None:
    transport = SMSTransport(
        twilio_sender(twilio), webhook_listen="127.0.0.1:0", auth_token=AUTH_TOKEN
    )  # the daemon closes it
    config = load_config(
        None, {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")}
    )

    def answer(request: Request) -> Response:
        question = request.messages[-1].text
        return text_reply(
            " ".join(f"w{i}" for i in range(900)) if "long" in question else "echo: " + question
        )

    provider = FunctionProvider(answer)
    async with serving(transport, config, provider, [OWNER]):
        url = f"http://127.0.0.1:{transport.port}/sms/twilio"
        transport.public_url = url  # what twilio would be told to call
        form = {"MessageSid": "SM1", "From": OWNER, "To": "+15550000000", "Body": "ping"}
        validator = RequestValidator(AUTH_TOKEN)
        assert await post_webhook(url, form, "forged") == 403
        signed = validator.compute_signature(url, form)
        assert await post_webhook(url, form, signed) == 200
        assert await post_webhook(url, form, signed) == 200  # twilio's retry: answered once
        stranger = {**form, "MessageSid": "SM2", "From": "+15556660666"}
        assert await post_webhook(url, stranger, validator.compute_signature(url, stranger)) == 200
        with anyio.fail_after(10):
            while not twilio.sent:
                await anyio.sleep(0.02)
        long = {**form, "MessageSid": "SM3", "Body": "something long"}
        assert await post_webhook(url, long, validator.compute_signature(url, long)) == 200
        with anyio.fail_after(10):
            while len(twilio.sent) < 4:
                await anyio.sleep(0.02)
    # Stopped cleanly (what it had still to send went out first): nothing more came.
    first, *parts = [(s["To"], s["Body"]) for s in twilio.sent]
    assert first == (OWNER, "echo: ping") and len(provider.requests) == 2
    # the 1,600-character limit: split on words, nothing lost
    assert all(to == OWNER and len(body) <= 1600 for to, body in parts)
    assert " ".join(body for _, body in parts).split() == [f"w{i}" for i in range(900)]
