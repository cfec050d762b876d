"""Email against a real Dovecot (IMAP in) and a real aiosmtpd server (SMTP out)."""

from __future__ import annotations

import ssl
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import ApproverConfig, RuleConfig, load_config
from rousseau.messages import Inbound
from rousseau.transports.mail import (
    EmailTransport,
    body_text,
    html_to_text,
    is_automatic,
    suspicion,
)
from tests.fakes.smtp import SMTPSink
from tests.helpers import serving, taken_side_by_side
from tests.mail.dovecot import Dovecot
from tests.transports.harness_email import EmailHarness, mail
from tests.transports.test_conformance import act, daemon, delivered, settle

pytestmark = pytest.mark.anyio
PDF = b"%PDF-1.4\n%fake\n%%EOF\n"


def parse(raw: bytes) -> EmailMessage:
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    return message


@pytest.fixture
def harness(dovecot: Dovecot) -> EmailHarness:
    made = EmailHarness(dovecot)
    yield made  # type: ignore[misc]
    made.close()


# -- reading mail ----------------------------------------------------------------------------


def test_html_becomes_text_without_the_quoted_thread() -> None:
    html = """<html><head><style>p {color: red}</style></head><body>
    <p>Can you <b>check</b> the logs?</p><ul><li>web</li><li>db</li></ul>
    <div class="gmail_quote">On Mon, Bot wrote:<blockquote>old text</blockquote></div>
    </body></html>"""
    assert html_to_text(html) == "Can you check the logs?\n\n- web\n- db"


def test_outlook_history_is_cut() -> None:
    html = '<div>Yes please.</div><div id="divRplyFwdMsg"><b>From:</b> Bot</div><p>old</p>'
    assert html_to_text(html) == "Yes please."


def test_plain_text_loses_quotes_and_signature() -> None:
    text = (
        "Thanks, that works.\n\n-- \nAlice\nHead of Things\n\n"
        "On Mon, Nov 30, 2026 at 9:00 AM Bot <bot@example.org> wrote:\n> echo: hello\n"
    )
    assert body_text(mail("a@example.org", ["b@example.org"], text)) == "Thanks, that works."


def test_html_only_multipart_is_read() -> None:
    message = EmailMessage()
    message["From"] = "a@example.org"
    message.set_content(
        "<p>What is <i>two</i> plus two?</p><blockquote>quoted</blockquote>", subtype="html"
    )
    message.add_attachment(b"\x89PNG", maintype="image", subtype="png", filename="x.png")
    assert body_text(message) == "What is two plus two?"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Return_Path": "<owner@evil.example>"}, "envelope sender"),
        (
            {"Authentication_Results": "mx.example.org; dmarc=fail header.from=example.org"},
            "dmarc=fail",
        ),
        (
            {"Authentication_Results": "mx.example.org; spf=fail smtp.mailfrom=example.org"},
            "spf=fail",
        ),
    ],
)
def test_spoofed_senders_are_suspect(headers: dict[str, str], reason: str) -> None:
    message = mail("owner@example.org", ["bot@example.org"], "hi", **headers)
    found = suspicion(message, "owner@example.org")
    assert found is not None and reason in found


def test_genuine_senders_are_not_suspect() -> None:
    message = mail(
        "owner@example.org",
        ["bot@example.org"],
        "hi",
        Authentication_Results="mx.example.org; spf=pass; dkim=pass; dmarc=pass",
        Return_Path="<bounces+x@mail.example.org>",
    )
    assert suspicion(message, "owner@example.org") is None


def test_only_the_receiving_servers_results_count() -> None:
    """A forged 'pass' further down cannot outvote the receiving server's 'fail' on top."""
    message = mail("owner@example.org", ["bot@example.org"], "hi")
    message["Authentication-Results"] = "mx.example.org; dmarc=fail"
    message["Authentication-Results"] = "evil.example; dmarc=pass"
    assert suspicion(message, "owner@example.org") == "dmarc=fail"


def test_automatic_mail_is_recognised() -> None:
    assert is_automatic(mail("a@x.org", ["b@x.org"], "away", Auto_Submitted="auto-replied"))
    assert is_automatic(mail("a@x.org", ["b@x.org"], "news", Precedence="bulk"))
    assert is_automatic(mail("a@x.org", ["b@x.org"], "bounce", Return_Path="<>"))
    assert not is_automatic(mail("a@x.org", ["b@x.org"], "hello"))


# -- against the servers -------------------------------------------------------------------


async def test_reply_is_threaded_with_text_and_html(harness: EmailHarness, tmp_path: Path) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        first = mail(harness.owner, [harness.address], "Is **this** on?", subject="Plans")
        await act(harness.deliver, first)
        await delivered(harness, 1)
        [reply] = harness.smtp.messages()
        assert reply["Subject"] == "Re: Plans"
        assert reply["In-Reply-To"] == first["Message-ID"]
        assert first["Message-ID"] in reply["References"]
        assert reply["Auto-Submitted"] == "auto-replied"
        html = reply.get_body(preferencelist=("html",))
        assert html is not None and "<strong>this</strong>" in html.get_content()

        # the correspondent answers in the thread: the same session, a longer history
        second = mail(
            harness.owner,
            [harness.address],
            f"And now?\n\nOn Mon, Bot wrote:\n> {first.get_content().strip()}\n",
            subject="Re: Plans",
            In_Reply_To=reply["Message-ID"],
            References=f"{first['Message-ID']} {reply['Message-ID']}",
        )
        await act(harness.deliver, second)
        await delivered(harness, 2)
        assert provider.requests[1].messages[-1].text == "And now?"
        assert len(provider.requests[1].messages) == 3
        answer = harness.smtp.messages()[1]
        assert answer["In-Reply-To"] == second["Message-ID"]
        assert answer["References"].split()[0] == first["Message-ID"]
    flags = harness.dovecot.flags(harness.user)
    assert all(b"\\Seen" in f for f in flags.values()) and len(flags) == 2


async def test_html_only_message_is_answered(harness: EmailHarness, tmp_path: Path) -> None:
    message = mail(harness.owner, [harness.address], "ignored")
    message.set_content(
        "<div>What time <b>is</b> it?</div><blockquote>old</blockquote>", subtype="html"
    )
    message.add_attachment(
        b"data", maintype="application", subtype="octet-stream", filename="a.bin"
    )
    async with daemon(harness, tmp_path):
        await act(harness.deliver, message)
        [reply] = await delivered(harness, 1)
    # The attachment, of a type not taken in, is named for the model instead.
    assert reply.text == "echo: What time is it?\n[not taken: a.bin (application/octet-stream)]"


async def test_spoofed_and_automatic_mail_get_no_answer(
    harness: EmailHarness, tmp_path: Path
) -> None:
    async with daemon(harness, tmp_path) as (_, provider):
        spoofed = mail(harness.owner, [harness.address], "rm -rf", Return_Path="<x@evil.example>")
        await act(harness.deliver, spoofed)
        away = mail(harness.owner, [harness.address], "I am away", Auto_Submitted="auto-replied")
        await act(harness.deliver, away)
        await act(harness.dm, "genuine")
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.text == "echo: genuine" and len(provider.requests) == 1


async def test_no_message_is_answered_twice_across_a_restart(
    harness: EmailHarness, tmp_path: Path
) -> None:
    message = mail(harness.owner, [harness.address], "once")
    async with daemon(harness, tmp_path):
        await act(harness.deliver, message)
        await delivered(harness, 1)
    # the same mail again, unseen (as if the daemon had died before marking it seen)
    await act(harness.deliver, message)
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.dm, "after the restart")
        await delivered(harness, 2)
        await settle()
    assert [d.text for d in harness.delivered()] == ["echo: once", "echo: after the restart"]
    assert len(provider.requests) == 1
    assert all(b"\\Seen" in f for f in harness.dovecot.flags(harness.user).values())


async def test_polling_without_idle(dovecot: Dovecot, tmp_path: Path) -> None:
    harness = EmailHarness(dovecot, idle=False, poll_interval=0.3)
    try:
        async with daemon(harness, tmp_path):
            await act(harness.dm, "polled")
            [reply] = await delivered(harness, 1)
        assert reply.text == "echo: polled"
    finally:
        harness.close()


async def test_a_refused_send_is_retried(harness: EmailHarness, tmp_path: Path) -> None:
    harness.smtp.refuse = 1
    async with daemon(harness, tmp_path):
        await act(harness.dm, "try again")
        [reply] = await delivered(harness, 1)
        await settle()
    assert reply.text == "echo: try again" and len(harness.delivered()) == 1


async def test_tls_and_starttls_with_a_private_ca(dovecot: Dovecot) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(dovecot.cert, dovecot.root / "key.pem")
    user = dovecot.add_user()
    for security, port in (("tls", dovecot.tls_port), ("starttls", dovecot.port)):
        sink = (
            SMTPSink(user, tls=server) if security == "tls" else SMTPSink(user, starttls=server)
        ).start()
        try:
            transport = EmailTransport(
                imap_addr=f"127.0.0.1:{port}",
                username=user,
                password="secret",
                smtp_addr=f"127.0.0.1:{sink.port}",
                from_addr=f"{user}@example.org",
                security=security,  # type: ignore[arg-type]
                ca_file=str(dovecot.cert),
            )
            assert user in await transport.check()
            assert sink.logins == [user]
        finally:
            sink.stop()


async def test_an_untrusted_certificate_is_refused(dovecot: Dovecot) -> None:
    transport = EmailTransport(
        imap_addr=f"127.0.0.1:{dovecot.tls_port}",
        username=dovecot.add_user(),
        password="secret",
        smtp_addr="127.0.0.1:1",
        from_addr="bot@example.org",
    )
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await transport.check()


async def test_wrong_password_is_one_clear_error(dovecot: Dovecot) -> None:
    transport = EmailTransport(
        imap_addr=f"127.0.0.1:{dovecot.port}",
        username=dovecot.add_user(),
        password="wrong",
        smtp_addr="127.0.0.1:1",
        from_addr="bot@example.org",
        security="plain",
    )
    with pytest.raises(ConnectionError, match=r"email: IMAP .*failed"):
        with anyio.fail_after(15):
            await transport.check()


# -- files -------------------------------------------------------------------------------------


async def test_an_attachment_reaches_the_model_and_the_workspace(
    harness: EmailHarness, tmp_path: Path
) -> None:
    message = mail(harness.owner, [harness.address], "Summarise the attached, please.")
    message.add_attachment(PDF, maintype="application", subtype="pdf", filename="q3.pdf")
    async with daemon(harness, tmp_path) as (_, provider):
        await act(harness.deliver, message)
        await delivered(harness, 1)
    [attachment] = provider.requests[0].messages[-1].attachments
    assert (attachment.name, attachment.media_type, attachment.size) == (
        "q3.pdf",
        "application/pdf",
        len(PDF),
    )
    assert (tmp_path / "ws" / attachment.saved_as).read_bytes() == PDF
    assert provider.requests[0].media[attachment.sha256] == PDF


async def test_a_mail_too_large_for_its_files_is_read_only_in_part(
    harness: EmailHarness, tmp_path: Path
) -> None:
    """imapclient gives a mail whole: one past what its files may be (6.8 MB of base64, the
    limit 100 kB) is fetched only up to the limit and some room for its text, its files
    refused with its size; the mailbox goes on."""
    from tests.transports.test_conformance_media import daemon as media_daemon

    message = mail(harness.owner, [harness.address], "Summarise the attached, please.")
    message.add_attachment(
        PDF + bytes(5_000_000), maintype="application", subtype="pdf", filename="big.pdf"
    )
    async with media_daemon(harness, tmp_path, {"media": {"max_bytes": 100_000}}) as (
        _,
        provider,
    ):
        await act(harness.deliver, message)
        [refused] = await delivered(harness, 1)
        await act(harness.dm, "still there?")
        await delivered(harness, 2)
        await settle()
    assert refused.text.startswith("Sorry, this mail is too large (6.8 MB)"), refused.text
    assert "the limit is 0.1 MB" in refused.text
    [request] = provider.requests
    assert request.messages[-1].text.strip() == "still there?"
    assert [p for p in (tmp_path / "media").rglob("*") if p.is_file()] == []
    assert not list((tmp_path / "ws").rglob("big.pdf"))


async def test_send_file_attaches_the_file_to_the_reply(
    harness: EmailHarness, tmp_path: Path
) -> None:
    def answer(request: Request) -> Response:
        if request.messages[-1].tool_results:
            return text_reply("Attached.")
        return tool_reply("send_file", {"path": "table.csv", "caption": "The table."})

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "table.csv").write_bytes(b"a,b\n1,2\n")
    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
        },
    )
    config.agent.approver = ApproverConfig(allow=[RuleConfig(tool="send_file")])
    async with serving(harness.transport(), config, FunctionProvider(answer), [harness.owner]):
        await act(harness.deliver, mail(harness.owner, [harness.address], "The table?"))
        await delivered(harness, 1)
        with anyio.fail_after(20):
            while not harness.files_delivered():
                await anyio.sleep(0.05)
    answer_mail, file_mail = harness.smtp.messages()
    assert answer_mail.get_body(preferencelist=("plain",)).get_content().strip() == "Attached."
    [part] = list(file_mail.iter_attachments())
    assert (part.get_filename(), part.get_content_type()) == ("table.csv", "text/csv")
    assert part.get_payload(decode=True) == b"a,b\n1,2\n"
    assert file_mail.get_body(preferencelist=("plain",)).get_content().strip() == "The table."


async def test_a_drain_takes_its_senders_side_by_side(harness: EmailHarness) -> None:
    """Mail from two senders waiting together is handed over together (so it is stored in
    one commit), not one sender after the other; then it is all marked seen."""
    senders = (harness.owner, "friend@example.org")
    for sender in senders:
        harness.deliver(mail(sender, [harness.address], f"from {sender}"))
    taken = await taken_side_by_side(harness.transport(), senders, by=lambda i: i.sender_id)
    assert sorted(taken) == sorted(senders)
    flags = harness.dovecot.flags(harness.user).values()
    assert len(flags) == 2 and all(b"\\Seen" in f for f in flags)


async def test_a_failed_mail_stays_unseen_and_the_other_senders_are_taken(
    harness: EmailHarness,
) -> None:
    harness.deliver(mail(harness.owner, [harness.address], "fails"))
    harness.deliver(mail("friend@example.org", [harness.address], "fine"))
    taken: list[str] = []

    async def fails_one(inbound: Inbound) -> None:
        if inbound.text.startswith("fails"):
            raise OSError("the disk is full")
        taken.append(inbound.text)

    transport = harness.transport()
    failures: tuple[BaseException, ...] = ()
    try:
        with anyio.fail_after(30):
            try:
                await transport.run(fails_one)
            except* OSError as group:
                failures = group.exceptions
    finally:
        await transport.aclose()
    assert [str(e) for e in failures] == ["the disk is full"]
    assert [t.strip() for t in taken] == ["fine"]
    seen = sorted(b"\\Seen" in f for f in harness.dovecot.flags(harness.user).values())
    assert seen == [False, True], "the failed one is taken again at the next drain"
