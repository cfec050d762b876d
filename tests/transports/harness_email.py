"""The email adapter's harness: real IMAP (Dovecot) in, real SMTP (aiosmtpd) out."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.mail import MAX_LENGTH, EmailTransport
from tests.fakes.smtp import SMTPSink
from tests.mail.dovecot import Dovecot
from tests.transports.conformance import Delivered, DeliveredFile, File


def mail(
    sender: str,
    to: list[str],
    text: str,
    *,
    cc: list[str] = (),  # type: ignore[assignment]
    subject: str = "A question",
    message_id: str | None = None,
    **headers: str,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    message["Subject"] = subject
    message["Date"] = formatdate()
    message["Message-ID"] = message_id or make_msgid(domain="example.org")
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    return message


class EmailHarness:
    name = "email"
    owner = "owner@example.org"
    stranger = "eve@example.net"
    dm_chat = owner
    group_chat = owner  # a reply goes to the sender, in the mail's own thread
    measure = staticmethod(len)
    limit = MAX_LENGTH
    long_parts = 1  # one reply is one mail, however long
    no_typing = "email has no typing indicator"
    no_mention_after = "email names the bot in To, not in the text: a mention has no place"

    def __init__(self, dovecot: Dovecot, **options: Any) -> None:
        self.dovecot = dovecot
        self.user = dovecot.add_user()
        self.address = f"{self.user}@example.org"
        self.smtp = SMTPSink(self.user, "secret").start()
        self.options = options
        self.last: EmailMessage | None = None

    def transport(self) -> Transport:
        options: dict[str, Any] = {"poll_interval": 2.0, **self.options}
        return EmailTransport(
            imap_addr=f"127.0.0.1:{self.dovecot.port}",
            username=self.user,
            password="secret",
            smtp_addr=f"127.0.0.1:{self.smtp.port}",
            from_addr=self.address,
            security="plain",
            **options,
        )

    def deliver(self, message: EmailMessage) -> None:
        self.last = message
        self.dovecot.deliver(self.user, bytes(message))

    def dm(self, text: str, *, sender: str | None = None) -> None:
        self.deliver(mail(sender or self.owner, [self.address], text))

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        message = mail(sender or self.owner, [self.address], text)
        maintype, _, subtype = file.media_type.partition("/")
        message.add_attachment(file.data, maintype=maintype, subtype=subtype, filename=file.name)
        self.deliver(message)

    def group(self, text: str, *, mentioned: bool) -> None:
        others = ["friend@example.org"]
        if mentioned:
            self.deliver(mail(self.owner, [self.address, *others], text))
        else:
            self.deliver(mail(self.owner, others, text, cc=[self.address]))

    def own_message(self, text: str) -> None:
        self.deliver(mail(self.address, [self.owner], text))

    def redeliver_last(self) -> None:
        assert self.last is not None
        self.deliver(self.last)

    def drop_connection(self) -> None:
        self.dovecot.kick(self.user)

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=str(message["To"]), text=_plain(message))
            for message in self.smtp.messages()
            if not list(message.iter_attachments())
        ]

    def files_delivered(self) -> list[DeliveredFile]:
        """Each attached file, one mail per file, its text the caption."""
        return [
            DeliveredFile(
                chat=str(message["To"]),
                name=part.get_filename() or "",
                data=part.get_payload(decode=True),
                inline=part.get_content_disposition() == "inline",
                caption=_plain(message),
            )
            for message in self.smtp.messages()
            for part in message.iter_attachments()
        ]

    def close(self) -> None:
        self.smtp.stop()


def _plain(message: EmailMessage) -> str:
    plain = message.get_body(preferencelist=("plain",))
    assert plain is not None
    return str(plain.get_content()).replace("\r\n", "\n").removesuffix("\n")
