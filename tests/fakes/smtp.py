"""A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps what it receives, with AUTH."""

from __future__ import annotations

import ssl
import threading
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from tests.helpers import free_port


class _Handler:
    def __init__(self, sink: SMTPSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        if self.sink.refuse:
            self.sink.refuse -= 1
            return "451 4.3.0 try again later"
        raw = envelope.original_content or b""
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        with self.sink.lock:
            self.sink.received.append((list(envelope.rcpt_tos), message))
        return "250 OK"


class SMTPSink:
    def __init__(
        self,
        user: str = "bot",
        password: str = "secret",
        *,
        tls: ssl.SSLContext | None = None,
        starttls: ssl.SSLContext | None = None,
    ) -> None:
        self.user = user
        self.password = password
        self.port = free_port()
        self.received: list[tuple[list[str], EmailMessage]] = []
        self.logins: list[str] = []
        self.refuse = 0
        """Refuse this many messages with a temporary error."""
        self.lock = threading.Lock()
        self.controller = Controller(
            _Handler(self),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self._authenticate,
            auth_require_tls=starttls is not None,
            ssl_context=tls,
            tls_context=starttls,
            require_starttls=starttls is not None,
        )

    def _authenticate(
        self, server: Any, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and data.login.decode() == self.user
            and data.password.decode() == self.password
        )
        if ok:
            self.logins.append(self.user)
        return AuthResult(success=ok, handled=False)

    def start(self) -> SMTPSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def messages(self) -> list[EmailMessage]:
        with self.lock:
            return [m for _, m in self.received]
