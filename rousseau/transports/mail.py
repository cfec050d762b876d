"""Email: IMAP in (IDLE where the server has it, polling otherwise), SMTP out.

IMAP goes through IMAPClient (imaplib underneath: TLS, STARTTLS and IDLE) on a worker thread,
one call at a time; SMTP through aiosmtplib. A message is marked seen only after the router
has persisted it, and its Message-ID is the inbound id, so a crash in between replays it into
the router's duplicate check rather than into a second answer.
"""

from __future__ import annotations

import functools
import json
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesHeaderParser, BytesParser
from email.utils import formatdate, getaddresses, make_msgid, parseaddr
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.base import describe, file_bytes, take_by_chat, take_files
from rousseau.transports.unreadable import checked, refuse, repaired

if TYPE_CHECKING:
    from imapclient import IMAPClient

log = structlog.get_logger("rousseau.email")

MAX_LENGTH = 1_000_000  # one reply is one mail: no platform limit worth splitting for
MAX_FILE_BYTES = 18_000_000
"""The largest file sent: base64 makes it about 24 MB, under the common 25 MB mail limit."""
Security = Literal["tls", "starttls", "plain"]
T = TypeVar("T")

_QUOTE_CLASSES = ("gmail_quote", "moz-cite-prefix", "yahoo_quoted", "protonmail_quote")
_CUT_IDS = ("divrplyfwdmsg", "appendonsend")  # Outlook: everything after is the old thread
_BLOCKS = frozenset(
    "p div br tr li ul ol h1 h2 h3 h4 h5 h6 pre table section article header footer".split()
)
_SKIP = frozenset({"script", "style", "head", "title"})
_TRY_LATER = ("[UNAVAILABLE]", "[INUSE]")
"""IMAP response codes (RFC 5530) of a login refused for now, not for good."""
_FETCH = 20
"""Unseen mails looked at in one round (their sizes fetched in one command)."""
_TEXT_ROOM = 2_000_000
"""Bytes of a mail read beyond what its files may take (base64 makes them a third larger):
room for its headers and text."""


class MailError(TransportError):
    """The IMAP or SMTP server could not be reached or refused a command."""


# -- reading a message --------------------------------------------------------------------


class _TextOfHtml(HTMLParser):
    """HTML to readable text, dropping quoted history (blockquotes, the clients' quote blocks).

    Written on the standard parser because the converters on offer keep quoted replies, and
    dropping them is the point here."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping: tuple[str, int] | None = None  # (tag, depth) of a dropped element
        self._cut = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._cut:
            return
        if self._skipping is not None:
            name, depth = self._skipping
            if tag == name:
                self._skipping = (name, depth + 1)
            return
        found = dict(attrs)
        classes = (found.get("class") or "").lower()
        if (found.get("id") or "").lower() in _CUT_IDS:
            self._cut = True
        elif tag in _SKIP or tag == "blockquote" or any(c in classes for c in _QUOTE_CLASSES):
            self._skipping = (tag, 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")
            if tag == "li":
                self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping is not None:
            name, depth = self._skipping
            if tag == name:
                self._skipping = None if depth == 1 else (name, depth - 1)
            return
        if tag in _BLOCKS and tag not in ("br", "li"):
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skipping is None and not self._cut:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def html_to_text(html: str) -> str:
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    return parser.text()


def strip_reply(text: str) -> str:
    """The new part of a reply: quoted history and the signature removed."""
    from email_reply_parser import EmailReplyParser

    return str(EmailReplyParser.parse_reply(text)).strip()


def body_text(message: EmailMessage) -> str:
    """What the correspondent wrote: text/plain preferred, HTML converted, quotes stripped."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, UnicodeError):  # an unknown or lying charset
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", errors="replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        content = html_to_text(content)
    return strip_reply(content.replace("\r\n", "\n"))


def _address(value: str | None) -> str:
    return parseaddr(value or "")[1].strip().lower()


def _addresses(message: EmailMessage, *names: str) -> list[str]:
    values = [str(v) for name in names for v in message.get_all(name, [])]
    return [addr.lower() for _, addr in getaddresses(values) if addr]


def _number(value: object) -> int:
    """A size the server gave (0 if it gave none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sender_of(raw: object) -> str:
    """The From address of a fetched mail, read from its headers alone: its sender's mails
    are taken in order ("" for a mail without one)."""
    if not isinstance(raw, bytes):
        return ""
    try:
        headers = BytesHeaderParser(policy=policy.default).parsebytes(raw)
        return ",".join(_addresses(headers, "From"))
    except Exception:  # a malformed header: read (and refused) with the whole mail
        return ""


def _domain(address: str) -> str:
    return address.rpartition("@")[2]


def _aligned(one: str, other: str) -> bool:
    return one == other or one.endswith("." + other) or other.endswith("." + one)


def suspicion(message: EmailMessage, sender: str) -> str | None:
    """Why this message may not really be from `sender`, or None.

    Only the topmost Authentication-Results header counts: it is the receiving server's own,
    while anything below it came with the message and may be forged. It is used only to
    refuse, never to admit."""
    results = message.get("Authentication-Results")
    if results is not None:
        verdicts = dict(re.findall(r"\b(spf|dkim|dmarc)=([a-z]+)", str(results).lower()))
        if verdicts.get("dmarc") == "fail":
            return "dmarc=fail"
        if "dmarc" not in verdicts and "pass" not in verdicts.values():
            failed = [k for k, v in verdicts.items() if v in ("fail", "softfail")]
            if failed:
                return f"{failed[0]}={verdicts[failed[0]]}"
    envelope = _address(message.get("Return-Path"))
    if envelope and not _aligned(_domain(envelope), _domain(sender)):
        return f"envelope sender {envelope} does not match From"
    return None


def is_automatic(message: EmailMessage) -> bool:
    """Bounces, auto-replies and bulk mail: answering them starts mail loops."""
    submitted = str(message.get("Auto-Submitted", "no")).strip().lower()
    precedence = str(message.get("Precedence", "")).strip().lower()
    return_path = message.get("Return-Path")
    bounce = return_path is not None and str(return_path).strip() in ("<>", "")
    return submitted != "no" or precedence in ("bulk", "junk", "list") or bounce


@dataclass(frozen=True, slots=True)
class Thread:
    """What a reply needs from the message it answers."""

    subject: str
    references: tuple[str, ...]

    def dumps(self) -> str:
        return json.dumps({"subject": self.subject, "references": list(self.references)})

    @classmethod
    def loads(cls, raw: str) -> Thread:
        data = json.loads(raw)
        return cls(str(data["subject"]), tuple(str(r) for r in data["references"]))


def _ids(value: Any) -> list[str]:
    """The <message ids> of a header (8-bit bytes in it, which the parser keeps as lone
    surrogates, shown as U+FFFD)."""
    return re.findall(r"<[^<>\s]+>", repaired(str(value or "")))


# -- the transport --------------------------------------------------------------------------


def split_addr(addr: str, default_port: int) -> tuple[str, int]:
    host, _, port = addr.rpartition(":") if ":" in addr else (addr, "", "")
    return host.strip("[]"), int(port) if port else default_port


class EmailTransport:
    name = "email"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(
        self,
        *,
        imap_addr: str,
        username: str,
        password: str,
        smtp_addr: str,
        from_addr: str | None = None,
        smtp_username: str | None = None,
        smtp_password: str | None = None,
        mailbox: str = "INBOX",
        poll_interval: float = 60.0,
        security: Security = "tls",
        idle: bool = True,
        ca_file: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.security = security
        imap_port = 993 if security == "tls" else 143
        smtp_port = {"tls": 465, "starttls": 587, "plain": 25}[security]
        self.imap_host, self.imap_port = split_addr(imap_addr, imap_port)
        self.smtp_host, self.smtp_port = split_addr(smtp_addr, smtp_port)
        self.username = username
        self.password = password
        self.smtp_username = smtp_username if smtp_username is not None else username
        self.smtp_password = smtp_password if smtp_password is not None else password
        self._smtp_key = (
            "email.smtp_password" if smtp_password is not None else "email.imap_password"
        )
        self.address = (from_addr or username).lower()
        if "@" not in self.address:
            raise ValueError("email: set `from` to the bot's address")
        self.mailbox = mailbox
        self.poll_interval = poll_interval
        self.idle = idle
        self.ca_file = ca_file
        self.timeout = timeout
        # one context for every connection (it loads the CA bundle once)
        self._tls = ssl.create_default_context(cafile=ca_file) if security != "plain" else None
        self._state: KeyValue = MemoryKeyValue()
        self._client: IMAPClient | None = None
        self._stop = anyio.Event()
        self.media: MediaIntake | None = None
        import imapclient  # noqa: F401 - here, not first on the worker thread that connects

    def bind_state(self, state: KeyValue) -> None:
        self._state = state

    def bind_media(self, media: MediaIntake) -> None:
        """Take attachments and inline images in (unbound, only the text)."""
        self.media = media

    def _text(self, exc: BaseException | str) -> str:
        return describe(exc, self.password, self.smtp_password)

    def _smtp_failed(self, doing: str, exc: Exception) -> TransportError:
        import aiosmtplib

        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            return TransportAuthError(
                f"{self._smtp_key}: the SMTP server refused the login of {self.smtp_username} "
                f"({exc.code} {self._text(exc.message)}); set the right password"
            )
        return MailError(f"email: {doing}: {self._text(exc)}")

    @property
    def connected(self) -> bool:
        return self._client is not None

    def _smtp(self) -> dict[str, Any]:
        """How to reach the SMTP server, for sending and for checking alike."""
        return {
            "hostname": self.smtp_host,
            "port": self.smtp_port,
            "use_tls": self.security == "tls",
            "start_tls": self.security == "starttls",
            "tls_context": self._tls,
            "timeout": self.timeout,
        }

    # IMAPClient is blocking: every call runs on a worker thread, one at a time.
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
        except TransportError:
            raise  # already ours (and a ConnectionError, so an OSError)
        except (OSError, EOFError) as exc:
            raise MailError(f"email: IMAP {fn.__name__} failed: {self._text(exc)}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("imaplib", "imapclient")):
                raise MailError(f"email: IMAP {fn.__name__} failed: {self._text(exc)}") from exc
            raise

    def imap_session(self) -> IMAPClient:
        """A logged-in IMAP session on the mailbox, blocking (`rousseau init` reads the
        owner's first mail with it); the caller logs out."""
        return self._connect()

    def _connect(self) -> IMAPClient:
        from imapclient import IMAPClient
        from imapclient.exceptions import LoginError

        client = IMAPClient(
            self.imap_host,
            port=self.imap_port,
            ssl=self.security == "tls",
            ssl_context=self._tls if self.security == "tls" else None,
            timeout=self.timeout,
        )
        try:
            if self.security == "starttls":
                client.starttls(self._tls)
            try:
                client.login(self.username, self.password)
            except LoginError as exc:
                detail = self._text(_decoded(exc))
                if any(code in detail for code in _TRY_LATER):
                    raise
                raise TransportAuthError(
                    f"email: IMAP login failed for {self.username} ({detail}); set the right "
                    "email.imap_password (and email.imap_username)"
                ) from exc
            client.select_folder(self.mailbox)
        except BaseException:
            client.shutdown()
            raise
        return client

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        client = await self._call(self._connect)
        self._client = client
        idle = self.idle and client.has_capability("IDLE")
        log.info("email.connected", address=self.address, mailbox=self.mailbox, idle=idle)
        try:
            async with anyio.create_task_group() as tg:

                async def watch_stop() -> None:
                    await self._stop.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_stop)
                task_status.started()
                while True:
                    await self._drain(client, handler)
                    if idle:
                        await self._call(self._idle_wait, client)
                    else:
                        await anyio.sleep(self.poll_interval)
        finally:
            self._client = None
            # wakes a worker thread still blocked on the socket; it then ends on its own
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await anyio.to_thread.run_sync(_shutdown, client, abandon_on_cancel=True)

    def _idle_wait(self, client: IMAPClient) -> None:
        """Wait for the server to announce mail, at most poll_interval (a missed push is
        picked up by the next round)."""
        client.idle()
        try:
            client.idle_check(timeout=self.poll_interval)
        finally:
            client.idle_done()

    async def _drain(self, client: IMAPClient, handler: InboundHandler) -> None:
        """Take every unseen message; search again until none is left, so mail that arrived
        while we worked is not left waiting for the next IDLE round."""
        while uids := sorted(await self._call(client.search, ["UNSEEN"])):
            for start in range(0, len(uids), _FETCH):
                await self._take(client, handler, uids[start : start + _FETCH])

    async def _take(self, client: IMAPClient, handler: InboundHandler, uids: list[int]) -> None:
        """Messages read without marking them (see _bodies), handed over by sender (see
        take_by_chat), then those taken marked seen (one command). One that failed stays
        unseen, and with it what its sender sent after it: taken again at the next drain."""
        sized = await self._call(client.fetch, uids, ["RFC822.SIZE"])
        sizes = {uid: _number(sized.get(uid, {}).get(b"RFC822.SIZE")) for uid in uids}
        bodies, cut = await self._bodies(client, sizes)
        mails = [(uid, bodies.get(uid), sizes[uid] if uid in cut else 0) for uid in uids]
        taken: list[int] = []

        async def take(mail: tuple[int, object, int]) -> None:
            uid, raw, cut = mail
            read = self._read(raw, uid, cut=cut) if isinstance(raw, bytes) else None
            if read is not None:
                inbound, thread, files = read
                await self._state.set(f"thread:{inbound.message_id}", thread.dumps())
                await handler(await take_files(inbound, self.media, files))  # once persisted
            taken.append(uid)

        failed = await take_by_chat(mails, lambda mail: _sender_of(mail[1]), take)
        if taken:
            await self._call(client.add_flags, sorted(taken), [b"\\Seen"])
        if failed:
            raise failed[min(failed)]

    async def _bodies(
        self, client: IMAPClient, sizes: dict[int, int]
    ) -> tuple[dict[int, object], set[int]]:
        """The mails' bytes, without marking them seen, and those read only in part.
        imapclient gives a mail's body whole, never as a stream, so the server's size of
        each bounds what is held: mails are fetched in groups of at most `most` bytes
        together, and one larger than that only up to it (its files are then refused)."""
        files = self.media.limits.max_bytes * 4 // 3 if self.media is not None else 0
        most = files + _TEXT_ROOM
        bodies: dict[int, object] = {}
        cut: set[int] = set()
        group: list[int] = []
        for uid in sorted(sizes):
            if sizes[uid] > most:
                fetched = await self._call(client.fetch, [uid], [f"BODY.PEEK[]<0.{most}>"])
                bodies[uid] = fetched.get(uid, {}).get(b"BODY[]<0>")
                cut.add(uid)
                continue
            if group and sum(sizes[u] for u in group) + sizes[uid] > most:
                bodies |= await self._whole(client, group)
                group = []
            group.append(uid)
        if group:
            bodies |= await self._whole(client, group)
        return bodies, cut

    async def _whole(self, client: IMAPClient, uids: list[int]) -> dict[int, object]:
        fetched = await self._call(client.fetch, uids, ["BODY.PEEK[]"])
        return {uid: fetched.get(uid, {}).get(b"BODY[]") for uid in uids}

    def _read(
        self, raw: bytes, uid: int, *, cut: int = 0
    ) -> tuple[Inbound, Thread, list[Incoming]] | None:
        """A mail as the router takes it, checked, with what a reply to it needs and its
        files; None for one not to answer, or one that cannot be read (recorded as failed,
        and marked seen: a malformed mail must not stop the mailbox). Never raises. `cut`:
        the size of a mail read only in part, taken without its files."""
        try:
            message = BytesParser(policy=policy.default).parsebytes(raw)
            assert isinstance(message, EmailMessage)
            found = self._normalise(message, uid, cut=cut)
            return None if found is None else (checked(found[0]), *found[1:])
        except Exception as exc:
            refuse(self, exc, event="bad_message", uid=uid)
            return None

    def _normalise(
        self, message: EmailMessage, uid: int, *, cut: int = 0
    ) -> tuple[Inbound, Thread, list[Incoming]] | None:
        """`cut`: the size of a mail read only in part: its files are refused, the sender
        told so (when files are taken in at all; else its text is taken as far as it was
        read)."""
        senders = _addresses(message, "From")
        if len(senders) != 1:
            log.info("email.ignored", uid=uid, reason="no single From address")
            return None
        sender = senders[0]
        if sender == self.address:
            return None
        if is_automatic(message):
            log.info("email.ignored", uid=uid, reason="automatic message", sender=sender)
            return None
        doubt = suspicion(message, sender)
        if doubt is not None:
            log.warning("email.suspect_sender", uid=uid, sender=sender, reason=doubt)
            return None
        subject = str(message.get("Subject", "")).strip()
        text = body_text(message) or subject
        files = _files(message) if self.media is not None and not cut else []
        refusal = ""
        if cut and self.media is not None:
            limit = self.media.limits.max_bytes
            refusal = (
                f"Sorry, this mail is too large ({cut / 1_000_000:.1f} MB) for its files to"
                f" be taken in; the limit is {limit / 1_000_000:.1f} MB."
            )
        if not text and not files and not refusal:
            log.info("email.ignored", uid=uid, reason="empty", sender=sender)
            return None
        message_id = _ids(message.get("Message-ID"))
        own_id = message_id[0] if message_id else f"<uid-{uid}@{self.imap_host}>"
        references = _ids(message.get("References")) or _ids(message.get("In-Reply-To"))
        root = references[0] if references else own_id
        thread = Thread(repaired(subject), (*references, own_id)[-20:])
        to = _addresses(message, "To")
        cc = _addresses(message, "Cc")
        others = set(to + cc) - {self.address, sender}
        name = parseaddr(str(message.get("From", "")))[0].strip() or sender
        inbound = Inbound(
            transport=self.name,
            chat_id=sender,
            sender_id=sender,
            message_id=own_id,
            text=text,
            is_group=bool(others),
            mentioned=self.address in to or self.address not in cc,
            thread_id=root,
            sender_name=name,
            refusal=refusal,
        )
        return inbound, thread, files

    # -- sending ------------------------------------------------------------------------------

    async def compose(self, message: Outbound) -> EmailMessage:
        """The reply as a mail: threaded under what it answers, text and HTML alternatives."""
        import markdown

        thread: Thread | None = None
        if message.reply_to:
            stored = await self._state.get(f"thread:{message.reply_to}")
            thread = Thread.loads(stored) if stored else None
        mail = EmailMessage()
        mail["From"] = Address(addr_spec=self.address)
        mail["To"] = message.chat_id
        subject = thread.subject if thread else ""
        if not subject:
            subject = "Message from rousseau"
        elif not subject.lower().startswith("re:"):
            subject = f"Re: {subject}"
        mail["Subject"] = subject
        mail["Date"] = formatdate(localtime=True)
        mail["Message-ID"] = make_msgid(domain=_domain(self.address))
        if thread is not None:
            mail["In-Reply-To"] = thread.references[-1]
            mail["References"] = " ".join(thread.references)
        mail["Auto-Submitted"] = "auto-replied"  # RFC 3834: other robots must not answer
        mail.set_content(message.text)
        html = markdown.markdown(message.text, extensions=["fenced_code", "tables"])
        mail.add_alternative(f"<html><body>{html}</body></html>", subtype="html")
        if message.attachment is not None:
            await self._attach(mail, message)
        return mail

    async def _attach(self, mail: EmailMessage, message: Outbound) -> None:
        """The file as an attachment; an image inline, so mail apps show it in the body."""
        attachment = message.attachment
        assert attachment is not None
        data = await file_bytes(self.media, message)
        if isinstance(data, Outbound):  # gone from the blob store: the mail says so
            mail.add_attachment(data.text, filename="missing.txt")
            return
        maintype, _, subtype = attachment.media_type.partition("/")
        mail.add_attachment(
            data,
            maintype=maintype or "application",
            subtype=subtype or "octet-stream",
            filename=attachment.name or "file",
            disposition="inline" if attachment.is_image else "attachment",
        )

    async def send(self, message: Outbound) -> None:
        import aiosmtplib

        mail = await self.compose(message)
        try:
            await aiosmtplib.send(
                mail,
                username=self.smtp_username or None,
                password=self.smtp_password or None,
                **self._smtp(),
            )
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise self._smtp_failed(f"sending to {message.chat_id} failed", exc) from exc

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        return None  # mail has no typing indicator

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        """Log in to IMAP and SMTP and leave again, proving the settings."""
        import aiosmtplib

        client = await self._call(self._connect)
        await self._call(_shutdown, client)
        smtp = aiosmtplib.SMTP(**self._smtp())
        try:
            await smtp.connect()
            if self.smtp_username and self.smtp_password:
                await smtp.login(self.smtp_username, self.smtp_password)
            await smtp.quit()
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise self._smtp_failed(f"SMTP {self.smtp_host}:{self.smtp_port}", exc) from exc
        return f"{self.address} (IMAP {self.imap_host}:{self.imap_port}, SMTP {self.smtp_port})"

    async def aclose(self) -> None:
        """The IMAP connection ends with `run`, and each mail is sent on a fresh SMTP one."""


def _files(message: EmailMessage) -> list[Incoming]:
    """The mail's attachments and inline images (the parts that are not its text)."""
    found: list[Incoming] = []
    for part in message.iter_attachments():
        if not isinstance(part, EmailMessage) or part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        found.append(
            Incoming(
                name=repaired(part.get_filename() or f"attachment{len(found) + 1}"),
                media_type=part.get_content_type(),
                size=len(payload),
                fetch=functools.partial(_ready, payload),
                voice=part.get_content_maintype() == "audio",  # a recording: its words wanted
            )
        )
    return found


async def _ready(data: bytes, into: Download) -> None:
    """A file that came inside the mail (already read whole, with the mail): nothing left to
    download, only its limit to pass."""
    await into.write(data)


def _decoded(exc: Exception) -> str:
    """imaplib's error text, which arrives as the repr of the server's bytes."""
    text = str(exc)
    return text[2:-1] if text[:2] in ("b'", 'b"') else text


def _shutdown(client: IMAPClient) -> None:
    try:
        client.shutdown()
    except OSError:
        pass
