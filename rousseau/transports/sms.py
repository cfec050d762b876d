"""SMS through Twilio or Vonage: a delivery target (cron, notifications), and with Twilio
optionally two-way through a signed webhook.

Both SDKs are blocking (requests underneath): each send runs on a worker thread. The SDKs'
own retries are off, as the outbox retries a failed send with backoff.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import ConfigError, TransportAuthError, TransportError
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.transports.unreadable import checked, ident, refuse, text

if TYPE_CHECKING:
    from aiohttp import web

log = structlog.get_logger("rousseau.sms")

MAX_LENGTH = 1600  # Twilio refuses longer bodies; Vonage concatenates up to about as much
_TWILIO_DONE = frozenset({"sent", "delivered", "read"})
_TWILIO_FAILED = frozenset({"failed", "undelivered", "canceled"})
_VONAGE_REJECTED = frozenset({"4", "14"})
"""Vonage SMS API statuses for refused credentials (invalid credentials, invalid signature)."""


class SMSError(TransportError):
    """The SMS provider could not be reached or refused a message."""


class Sender(Protocol):
    def send(self, to: str, text: str) -> str:
        """Send one message (blocking); return the provider's id; raise SMSError, or
        TransportAuthError when the provider refuses the credentials."""
        ...

    def check(self) -> str:
        """A harmless authenticated call (blocking); what it proves."""
        ...

    def close(self) -> None:
        """Close pooled connections."""
        ...


class TwilioSender:
    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        from_number: str,
        *,
        base_url: str | None = None,
        status_timeout: float = 30.0,
        poll: float = 1.0,
    ) -> None:
        # everything send() needs, imported here and not on the worker thread that sends:
        # first imports on worker threads race other threads' compiles on CPython 3.11.7
        import twilio.base.exceptions  # noqa: F401
        from twilio.http.http_client import TwilioHttpClient
        from twilio.rest import Client

        http = TwilioHttpClient(timeout=30)
        self.client = Client(account_sid, auth_token, http_client=http)
        if base_url:
            self.client.api.base_url = base_url.rstrip("/")
        self.http = http
        self.from_number = from_number
        self.status_timeout = status_timeout
        self.poll = poll

    def send(self, to: str, text: str) -> str:
        from twilio.base.exceptions import TwilioException

        try:
            message = self.client.messages.create(to=to, from_=self.from_number, body=text)
            deadline = time.monotonic() + self.status_timeout
            # A message is accepted as `queued`; wait for the carrier's verdict, briefly.
            while message.status not in _TWILIO_DONE | _TWILIO_FAILED:
                if time.monotonic() > deadline:
                    log.warning("sms.status_pending", sid=message.sid, status=message.status)
                    return str(message.sid)
                time.sleep(self.poll)
                message = self.client.messages(str(message.sid)).fetch()
        except TwilioException as exc:
            _twilio_auth(exc)
            raise SMSError(
                f"sms: twilio refused the message to {to}: {_twilio_reason(exc)}"
            ) from None
        except OSError as exc:  # requests' connection errors are OSErrors
            raise SMSError(f"sms: twilio unreachable: {type(exc).__name__}") from None
        if message.status in _TWILIO_FAILED:
            raise SMSError(
                f"sms: message to {to} {message.status} "
                f"(error {message.error_code}: {message.error_message or 'no detail'})"
            )
        return str(message.sid)

    def check(self) -> str:
        from twilio.base.exceptions import TwilioException

        try:
            account = self.client.api.accounts(self.client.username).fetch()
        except TwilioException as exc:
            _twilio_auth(exc)
            raise SMSError(f"sms: twilio: {_twilio_reason(exc)}") from None
        except OSError as exc:
            raise SMSError(f"sms: twilio unreachable: {type(exc).__name__}") from None
        return f"twilio account {account.friendly_name} ({account.status}), from {self.from_number}"

    def close(self) -> None:
        if self.http.session is not None:
            self.http.session.close()


def _twilio_reason(exc: Exception) -> str:
    status, code, msg = (getattr(exc, k, None) for k in ("status", "code", "msg"))
    return f"HTTP {status} error {code}: {msg}" if status else str(exc)


def _twilio_auth(exc: Exception) -> None:
    """Raise TransportAuthError if twilio refused the account SID and auth token."""
    if getattr(exc, "status", None) == 401:
        raise TransportAuthError(
            f"sms.auth_token: twilio rejected the credentials ({_twilio_reason(exc)}); "
            "set sms.account_sid and sms.auth_token from the Twilio console"
        ) from None


def _vonage_rejected(detail: str) -> TransportAuthError:
    return TransportAuthError(
        f"sms.api_secret: vonage rejected the credentials ({detail}); "
        "set sms.api_key and sms.api_secret from the Vonage dashboard"
    )


class VonageSender:
    def __init__(
        self, api_key: str, api_secret: str, sender: str, *, base_url: str | None = None
    ) -> None:
        from vonage_http_client import Auth, HttpClient, HttpClientOptions
        from vonage_sms import Sms  # with SmsMessage and the errors send() uses

        options: dict[str, Any] = {"timeout": 30, "max_retries": 0}
        if base_url:
            if not base_url.startswith("https://"):
                raise ConfigError("sms.base_url: the vonage SDK speaks https only")
            options["rest_host"] = base_url.removeprefix("https://").rstrip("/")
        self.options = HttpClientOptions(**options)
        self.client = HttpClient(Auth(api_key=api_key, api_secret=api_secret), self.options)
        self.sms = Sms(self.client)
        self.sender = sender

    def send(self, to: str, text: str) -> str:
        from vonage_http_client import HttpRequestError
        from vonage_sms import SmsError, SmsMessage

        kind = None if text.isascii() else "unicode"
        try:
            response = self.sms.send(SmsMessage(to=to, from_=self.sender, text=text, type=kind))
        except SmsError as exc:
            status = re.search(r"error code (\d+)", str(exc))
            if status is not None and status.group(1) in _VONAGE_REJECTED:
                raise _vonage_rejected(str(exc).rpartition(": ")[2]) from None
            raise SMSError(f"sms: vonage refused the message to {to}: {exc}") from None
        except HttpRequestError as exc:
            if exc.response.status_code == 401:
                raise _vonage_rejected("HTTP 401") from None
            raise SMSError(f"sms: vonage answered {exc.response.status_code}") from None
        except OSError as exc:
            raise SMSError(f"sms: vonage unreachable: {type(exc).__name__}") from None
        return ",".join(m.message_id or "" for m in response.messages)

    def check(self) -> str:
        from vonage_http_client import HttpRequestError

        try:
            host = self.options.rest_host or "rest.nexmo.com"
            balance = self.client.get(host, "/account/get-balance", auth_type="basic") or {}
        except HttpRequestError as exc:
            if exc.response.status_code == 401:
                raise _vonage_rejected("HTTP 401") from None
            raise SMSError(f"sms: vonage answered {exc.response.status_code}") from None
        except OSError as exc:
            raise SMSError(f"sms: vonage unreachable: {type(exc).__name__}") from None
        return f"vonage account (balance {balance.get('value', '?')}), from {self.sender}"

    def close(self) -> None:
        session = getattr(self.client, "_session", None)  # the SDK offers no close of its own
        if session is not None:
            session.close()


class SMSTransport:
    name = "sms"
    max_length = MAX_LENGTH
    measure = staticmethod(len)

    def __init__(
        self,
        sender: Sender,
        *,
        webhook_listen: str | None = None,
        webhook_path: str = "/sms/twilio",
        public_url: str | None = None,
        auth_token: str | None = None,
    ) -> None:
        """With `webhook_listen`, inbound Twilio messages are taken there (their signature
        checked against `auth_token` and `public_url`, the address Twilio calls)."""
        if webhook_listen and not auth_token:
            raise ValueError("sms.webhook: needs twilio's auth_token to check signatures")
        self.sender = sender
        self.webhook_listen = webhook_listen
        self.webhook_path = webhook_path
        self.public_url = public_url or f"http://{webhook_listen}{webhook_path}"
        self.auth_token = auth_token
        self.port: int | None = None
        """The webhook's port once listening (useful when listening on port 0)."""
        self._connected = False
        self._stop = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._connected

    def bind_state(self, state: KeyValue) -> None:
        """SMS keeps nothing: the outbox already holds what is still to send."""

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        runner = await self._serve(handler) if self.webhook_listen else None
        self._connected = True
        log.info("sms.ready", webhook=self.public_url if runner else None)
        task_status.started()
        try:
            await self._stop.wait()
        finally:
            self._connected = False
            if runner is not None:
                with anyio.CancelScope(shield=True):
                    await runner.cleanup()

    async def _serve(self, handler: InboundHandler) -> web.AppRunner:
        from aiohttp import web

        async def receive(request: web.Request) -> web.Response:
            return await self._receive(request, handler)

        app = web.Application(client_max_size=64 * 1024)
        app.router.add_post(self.webhook_path, receive)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        assert self.webhook_listen is not None
        host, _, port = self.webhook_listen.rpartition(":")
        site = web.TCPSite(runner, host or "127.0.0.1", int(port))
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise SMSError(f"sms.webhook: cannot listen on {self.webhook_listen}: {exc}") from exc
        server = site._server
        if server is not None and server.sockets:  # type: ignore[attr-defined]
            self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return runner

    async def _receive(self, request: web.Request, handler: InboundHandler) -> web.Response:
        from aiohttp import web
        from twilio.request_validator import RequestValidator

        form = {k: str(v) for k, v in (await request.post()).items()}
        signature = request.headers.get("X-Twilio-Signature", "")
        url = self.public_url
        if request.query_string:
            url = f"{url}?{request.query_string}"
        assert self.auth_token is not None
        if not RequestValidator(self.auth_token).validate(url, form, signature):
            log.warning("sms.bad_signature", sender=form.get("From"))
            return web.Response(status=403, text="bad signature")
        inbound = self._read(form)
        if inbound is not None:
            await handler(inbound)
        # Twilio retries on errors; the answer is sent through the API, so the reply is empty.
        # One that cannot be read is answered alike: sent again, it would fail again.
        return web.Response(text="<Response/>", content_type="text/xml")

    def _read(self, form: dict[str, Any]) -> Inbound | None:
        """A posted message as the router takes it, checked; None for a post that is not
        one, or one that cannot be read (recorded as failed). Never raises."""
        try:
            sender, sid = form.get("From"), form.get("MessageSid")
            said = text(form.get("Body"), "Body").strip()
            if not sender or not sid or not said:
                return None
            sender = ident(sender, "From")
            return checked(
                Inbound(
                    transport=self.name,
                    chat_id=sender,
                    sender_id=sender,
                    message_id=ident(sid, "MessageSid"),
                    text=said,
                )
            )
        except Exception as exc:
            sid = form.get("MessageSid") if isinstance(form, dict) else None
            refuse(self, exc, message=sid if isinstance(sid, str) else None)
            return None

    async def send(self, message: Outbound) -> None:
        sid = await anyio.to_thread.run_sync(self.sender.send, message.chat_id, message.text)
        log.info("sms.sent", to=message.chat_id, id=sid)

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        return None

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        return await anyio.to_thread.run_sync(self.sender.check)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.sender.close)
