"""SMS: malformed Twilio webhook posts never raise past the adapter and are recorded when
refused; a signed post that cannot be read is answered as any other (Twilio would post it
again on an error) and the next message is answered.

Vonage is a delivery target only: rousseau takes no inbound Vonage webhook, so there is no
Vonage event to read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from structlog.testing import capture_logs
from twilio.request_validator import RequestValidator

from rousseau.transports.sms import SMSTransport, TwilioSender
from tests.fakes.sms import ACCOUNT_SID, AUTH_TOKEN, FakeTwilio
from tests.fuzz.events import FUZZ, HUGE, held, odd_text, refusals
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until
from tests.transports.test_sms import post_webhook

pytestmark = pytest.mark.anyio

OWNER = "+15551230001"
FORM = {"MessageSid": "SM1", "From": OWNER, "To": "+15550000000", "Body": "hello"}

form_values = st.one_of(odd_text, st.sampled_from(["", " ", HUGE, "\x00", "SM\ud800"]))
forms = st.dictionaries(
    st.sampled_from(["MessageSid", "From", "To", "Body", "NumMedia"]), form_values
).map(lambda spoiled: {**FORM, **spoiled})
"""A webhook's form is strings only (aiohttp decodes it, a lone surrogate's bytes as U+FFFD):
spoiled values (an empty one stands for a key absent)."""


def adapter() -> SMSTransport:
    sender = TwilioSender(ACCOUNT_SID, AUTH_TOKEN, "+15550000000", base_url="http://127.0.0.1:9")
    return SMSTransport(sender)


@given(forms)
@example({**FORM, "From": "\ud800"})
@example({**FORM, "Body": "a\x00b"})
@FUZZ
async def test_a_posted_form_is_read_or_refused(form: dict[str, Any]) -> None:
    with capture_logs() as logs:
        read = adapter()._read(form)
    held(read, logs, "sms")


async def test_an_unreadable_signed_post_is_answered_and_the_next_message_too(
    tmp_path: Path,
) -> None:
    twilio = FakeTwilio().start()
    sender = TwilioSender(ACCOUNT_SID, AUTH_TOKEN, "+15550000000", base_url=twilio.url, poll=0.01)
    transport = SMSTransport(sender, webhook_listen="127.0.0.1:0", auth_token=AUTH_TOKEN)
    validator = RequestValidator(AUTH_TOKEN)
    try:
        with capture_logs() as logs:
            async with daemon(transport, tmp_path, [OWNER]) as (d, _):
                url = f"http://127.0.0.1:{transport.port}/sms/twilio"
                transport.public_url = url
                statuses = []
                for form in ({**FORM, "MessageSid": "SM\x00"}, {**FORM, "MessageSid": "SM2"}):
                    signature = validator.compute_signature(url, form)
                    statuses.append(await post_webhook(url, form, signature))
                await until(lambda: len(twilio.sent) == 1)
                counted = failed_inbound(d, "sms")
    finally:
        twilio.stop()
    assert statuses == [200, 200]
    assert [s["Body"] for s in twilio.sent] == ["echo: hello"]
    assert [e["reason"] for e in refusals(logs, "sms")]
    assert not restarts(logs)
    assert counted == 1
