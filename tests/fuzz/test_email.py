"""Email: malformed mails (broken headers, 8-bit junk, lying charsets, broken MIME) never
raise past the adapter and are recorded when refused; one in a real mailbox (Dovecot) is
marked seen and skipped, and the next mail is answered."""

from __future__ import annotations

from email.utils import make_msgid
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from structlog.testing import capture_logs

from rousseau.transports.mail import EmailTransport
from tests.fuzz.events import FUZZ, held, refusals, spoiled
from tests.mail.dovecot import Dovecot
from tests.transports.harness_email import EmailHarness
from tests.transports.test_poison_events import daemon, failed_inbound, restarts, until

pytestmark = pytest.mark.anyio

BOT = "bot@example.org"
MAIL: dict[str, Any] = {
    "From": "Ann Lee <ann@example.org>",
    "To": BOT,
    "Cc": "bob@example.org",
    "Subject": "=?utf-8?q?caf=C3=A9?=",
    "Message-ID": "<m1@example.org>",
    "References": "<m0@example.org> <m00@example.org>",
    "Return-Path": "<ann@example.org>",
    "Authentication-Results": "mx.example.org; spf=pass; dkim=pass",
    "MIME-Version": "1.0",
    "Content-Type": 'multipart/mixed; boundary="b"',
    "body": [
        "--b",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: quoted-printable",
        "",
        "Hello=2C there",
        "",
        "> quoted",
        "--b",
        'Content-Type: image/png; name="a.png"',
        'Content-Disposition: attachment; filename="a.png"',
        "Content-Transfer-Encoding: base64",
        "",
        "iVBORw0KGgo=",
        "--b--",
    ],
}


def raw(mail: dict[str, Any]) -> bytes:
    """The mail's bytes, as a server would hold them: whatever a field became is written
    as it is (a lone surrogate as the invalid UTF-8 its code point makes)."""
    lines = [f"{name}: {value}" for name, value in mail.items() if name != "body"]
    body = mail.get("body")
    lines += ["", *(str(line) for line in body)] if isinstance(body, list) else ["", str(body)]
    return "\r\n".join(lines).encode("utf-8", "surrogatepass")


def adapter() -> EmailTransport:
    made = EmailTransport(
        imap_addr="127.0.0.1:1",
        username="bot",
        password="secret",
        smtp_addr="127.0.0.1:2",
        from_addr=BOT,
        security="plain",
    )
    made.media = object()  # type: ignore[assignment]  # only whether files are taken in
    return made


@given(spoiled(MAIL))
@example({**MAIL, "Content-Type": "text/plain; charset=x-no-such-charset"})
@example({**MAIL, "From": "Ann <ann@exam\ud800ple.org>"})
@example({**MAIL, "Message-ID": "<m\udc801@example.org>"})
@example({**MAIL, "From": "Ann <a\x00nn@example.org>"})
@FUZZ
async def test_a_fetched_mail_is_read_or_refused(mail: dict[str, Any]) -> None:
    with capture_logs() as logs:
        read = adapter()._read(raw(mail), 7)
    held(read[0] if read else None, logs, "email")
    if read is not None:
        thread = read[1].dumps()
        thread.encode("utf-8")  # kept in the store for the reply


async def test_the_valid_mail_is_read() -> None:
    read = adapter()._read(raw(MAIL), 7)
    assert read is not None
    inbound, thread, files = read
    assert (inbound.text, inbound.sender_id, inbound.thread_id, inbound.sender_name) == (
        "Hello, there",
        "ann@example.org",
        "<m0@example.org>",
        "Ann Lee",  # the person's name, where their address is the sender id
    )
    assert thread.subject == "café" and [f.name for f in files] == ["a.png"]


JUNK_MAILS = [
    {**MAIL, "Content-Type": "multipart/mixed", "body": ["--b", "no boundary said", "--b--"]},
    {**MAIL, "Content-Type": "text/plain; charset=x-no-such-charset", "body": "caf\udce9"},
    {**MAIL, "Subject": "\udcff\udcfe", "From": "\udcff <owner@example.org>", "body": "\x00"},
    {**MAIL, "Content-Transfer-Encoding": "base64", "Content-Type": "text/plain", "body": "%%%"},
]
"""Mails a mailbox may hold that no client would write (8-bit junk, a lying charset, a
multipart without its boundary, broken base64)."""


async def test_malformed_mails_never_stop_the_mailbox(dovecot: Dovecot, tmp_path: Path) -> None:
    harness = EmailHarness(dovecot, poll_interval=0.5)
    try:
        with capture_logs() as logs:
            async with daemon(harness.transport(), tmp_path, [harness.owner]) as (d, _):
                for junk in JUNK_MAILS:
                    junk = {**junk, "To": harness.address, "Message-ID": make_msgid()}
                    await anyio.to_thread.run_sync(dovecot.deliver, harness.user, raw(junk))
                await anyio.to_thread.run_sync(harness.dm, "and this one?")
                await until(lambda: "echo: and this one?" in [m.text for m in harness.delivered()])
                counted = failed_inbound(d, "email")
    finally:
        harness.close()
    assert not restarts(logs)
    assert all(e["reason"] for e in refusals(logs, "email"))
    assert counted == len(refusals(logs, "email"))
