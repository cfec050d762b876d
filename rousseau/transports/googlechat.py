"""Google Chat as an HTTP endpoint app: Chat posts each interaction event to the daemon, which
checks Google's signed bearer token, takes the message in and answers 200 at once; replies go
out through the Chat API under the app's service account (the same for cron deliveries and
edits). google-auth checks the tokens and signs the service account's grants; the REST calls
are a thin client on aiohttp (Google's generated client, google-apps-chat, is gRPC-first and
its REST transport blocks on requests).

A direct message is answered; in a space, a message that @-mentions the app (all Chat sends an
app there), in its thread. Approvals come as card buttons, whose clicks come back as events.
"""

from __future__ import annotations

import datetime
import functools
import json
import time
from collections.abc import Mapping
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.abilities import Posts
from rousseau.transports.base import Throttled, take_files
from rousseau.transports.unreadable import Unreadable, checked, ident, refuse, text

try:
    import aiohttp
    import google.auth.exceptions
    import google.auth.jwt
    import google.auth.transport.requests
    from google.oauth2 import service_account
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the googlechat transport", "googlechat") from exc

log = structlog.get_logger("rousseau.googlechat")

MAX_LENGTH = 4096
"""Characters of a message's text, as Chat takes it."""
API = "https://chat.googleapis.com"
CHAT_ISSUER = "chat@system.gserviceaccount.com"
"""Who signs the tokens of the events Chat posts."""
CHAT_CERTS = f"https://www.googleapis.com/service_accounts/v1/metadata/x509/{CHAT_ISSUER}"
"""Its public certificates, for an app whose audience is its project number."""
GOOGLE_CERTS = "https://www.googleapis.com/oauth2/v1/certs"
"""Google's ID token certificates, for an app whose audience is its endpoint's URL."""
SCOPE = "https://www.googleapis.com/auth/chat.bot"
ANSWER = "rousseau_answer"
"""The function a card button names; its `answer` parameter is what pressing it says."""
CERTS_FOR = 3600.0
"""Seconds the certificates are kept before they are fetched again."""
_FAILURES = (aiohttp.ClientError, OSError, TimeoutError)
_REFUSED = (ValueError, google.auth.exceptions.GoogleAuthError)
_CREDENTIALS = (
    "googlechat.credentials_file: Google refused the service account's key ({why}); "
    "make a new JSON key (Google Cloud console > IAM > Service accounts > Keys)"
)


class GoogleChatTransport:
    name = "googlechat"
    max_length = MAX_LENGTH
    measure = staticmethod(len)
    shares_connections = True
    """Chat posts to one address: behind a balancer, every daemon of a cluster takes posts."""

    def __init__(
        self,
        credentials: Mapping[str, Any],
        *,
        audience: str | None,
        listen: str,
        path: str = "/googlechat",
        api_base: str | None = None,
        certs_url: str | None = None,
    ) -> None:
        self.credentials = service_account.Credentials.from_service_account_info(
            dict(credentials), scopes=[SCOPE]
        )
        self.audience = audience
        """What Chat's tokens must be for; None: any (signature, issuer and expiry still
        checked, and `findings` says to set it)."""
        self.by_url = (audience or "").startswith(("https://", "http://"))
        self.findings: list[str] = (
            []
            if audience
            else [
                "googlechat.audience is not set: posts are checked as Chat's but not as meant "
                "for this app; set the app's project number (Chat API > Configuration)"
            ]
        )
        self.api = (api_base or API).rstrip("/")
        self.certs_url = certs_url or (GOOGLE_CERTS if self.by_url else CHAT_CERTS)
        self.state: KeyValue = MemoryKeyValue()
        self.media: MediaIntake | None = None
        self.posts: Posts | None = Posts(
            transport=self.name, listen=listen, path=path, take=self._take_post
        )
        self._handler: InboundHandler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._certs: dict[str, str] = {}
        self._certs_at = 0.0
        self._token_lock = anyio.Lock()
        self._stop = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._handler is not None

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def bind_media(self, media: MediaIntake) -> None:
        self.media = media

    def _session_for(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=60, sock_connect=20)
            )
        return self._session

    # -- the service account -------------------------------------------------------------

    async def _token(self) -> str:
        """A current access token of the service account (its grant signed and exchanged in
        a worker thread: google-auth's refresh blocks)."""
        async with self._token_lock:
            if not self.credentials.valid:
                request = google.auth.transport.requests.Request()
                try:
                    await anyio.to_thread.run_sync(self.credentials.refresh, request)
                except google.auth.exceptions.RefreshError as exc:
                    raise TransportAuthError(_CREDENTIALS.format(why=_first(exc))) from None
                except google.auth.exceptions.TransportError as exc:
                    raise TransportError(f"googlechat: cannot reach Google: {exc}") from exc
            return str(self.credentials.token)

    async def _api(self, method: str, path: str, body: Any = None, **params: str) -> Any:
        """One Chat API call as the app; its JSON answer."""
        headers = {"Authorization": f"Bearer {await self._token()}"}
        try:
            async with self._session_for().request(
                method, f"{self.api}/v1/{path}", json=body, params=params or None, headers=headers
            ) as response:
                if response.status == 429:
                    raise Throttled.asked(response.headers, "Retry-After")
                if response.status in (401, 403):
                    said = _error(await response.text())
                    raise TransportAuthError(
                        f"googlechat.credentials_file: the Chat API refused the app "
                        f"({response.status}: {said}); enable the Chat API and configure the "
                        "app in the Google Cloud console"
                    )
                if response.status >= 400:
                    said = _error(await response.text())
                    raise TransportError(f"googlechat: {method} {path}: {response.status} {said}")
                return await response.json(content_type=None)
        except TransportError:
            raise
        except _FAILURES as exc:
            raise TransportError(f"googlechat: cannot reach {self.api}: {exc}") from exc

    # -- events posted by Chat -----------------------------------------------------------

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        await self._token()  # the credentials prove themselves before anything is taken
        self._handler = handler
        log.info("googlechat.connected", app=self.credentials.service_account_email)
        for finding in self.findings:
            log.warning("googlechat.no_audience", hint=finding)
        task_status.started()
        try:
            await self._stop.wait()  # the daemon's server takes the posts
        finally:
            self._handler = None

    async def _verified(self, headers: Mapping[str, str]) -> bool:
        """Whether the post carries a token Chat signed for this app, still valid."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        try:
            kid = google.auth.jwt.decode_header(token).get("kid")
            await self._fresh_certs(kid)
            claims = google.auth.jwt.decode(token, certs=self._certs, audience=self.audience)
        except _REFUSED as exc:
            log.warning("googlechat.post_refused", reason=_first(exc))
            return False
        signer = claims.get("email") if self.by_url else claims.get("iss")
        if signer != CHAT_ISSUER or (self.by_url and not claims.get("email_verified")):
            log.warning("googlechat.post_refused", reason=f"signed by {signer!r}, not Chat")
            return False
        return True

    async def _fresh_certs(self, kid: Any) -> None:
        """Google's certificates, fetched when old, or when a token names one not among
        them (keys rotate), at most once a minute for that."""
        age = time.monotonic() - self._certs_at
        if self._certs and age < CERTS_FOR and (kid in self._certs or age < 60):
            return
        try:
            async with self._session_for().get(self.certs_url) as response:
                response.raise_for_status()
                found = await response.json(content_type=None)
        except _FAILURES as exc:
            raise ValueError(f"the certificates could not be fetched: {exc}") from exc
        if not isinstance(found, dict):
            raise ValueError("the certificates are not an object")
        self._certs = {str(k): str(v) for k, v in found.items()}
        self._certs_at = time.monotonic()

    async def _take_post(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """One event: 401 without Chat's token; 200 once it is persisted (or is one to skip),
        with no synchronous reply; 503 when it could not be (not running, the store down)."""
        if not await self._verified(headers):
            return 401, ""
        handler = self._handler
        if handler is None:
            return 503, ""
        try:
            event = json.loads(body)
            read = self._read(event)
        except (Unreadable, ValueError, TypeError, KeyError, AttributeError) as exc:
            refuse(self, exc if isinstance(exc, Unreadable) else Unreadable(str(exc)))
            return 200, "{}"
        if read is None:
            return 200, "{}"
        inbound, files = read
        try:
            inbound = await take_files(inbound, self.media, files, unavailable=(TransportError,))
            await handler(inbound)
        except Exception as exc:
            log.info("googlechat.post_retry", message=inbound.message_id, error=type(exc).__name__)
            return 503, ""
        return 200, "{}"

    def _read(self, event: Any) -> tuple[Inbound, list[Incoming]] | None:
        """An event as the router takes it, with its message's files; None for one not to
        answer (the app added or removed, another app's message)."""
        if not isinstance(event, dict):
            raise Unreadable("the event is not an object")
        kind = event.get("type")
        if kind not in ("MESSAGE", "CARD_CLICKED"):
            return None
        message = event.get("message") or {}
        space = message.get("space") or event.get("space") or {}
        sender = message.get("sender") or event.get("user") or {}
        if kind == "CARD_CLICKED":
            sender = event.get("user") or sender
        if sender.get("type") == "BOT":
            return None
        direct = space.get("spaceType") == "DIRECT_MESSAGE" or space.get("type") == "DM"
        thread = (message.get("thread") or {}).get("name")
        message_name = ident(message.get("name"), "message.name")
        if kind == "CARD_CLICKED":
            said = _answer(event)
            if said is None:
                return None
            mentioned, files = True, []
            message_id = f"{message_name}/clicked/{text(event.get('eventTime'), 'eventTime')}"
        else:
            said = text(message.get("argumentText") or message.get("text") or "", "text").strip()
            mentioned = direct or _mentions_an_app(message)
            files = self._files(message)
            message_id = message_name
            if not said and not files:
                return None
        inbound = Inbound(
            transport=self.name,
            chat_id=ident(space.get("name"), "space.name"),
            sender_id=ident(sender.get("name"), "sender.name"),
            message_id=message_id,
            text=said,
            is_group=not direct,
            mentioned=mentioned,
            thread_id=None if direct else thread,
            sender_name=text(sender.get("displayName"), "displayName"),
            at=_seconds(event.get("eventTime")),
        )
        return checked(inbound), files

    def _files(self, message: dict[str, Any]) -> list[Incoming]:
        """Files uploaded to Chat with the message, to download through the media API."""
        if self.media is None:
            return []
        found = []
        for one in message.get("attachment") or []:
            resource = (one.get("attachmentDataRef") or {}).get("resourceName")
            if not resource:
                continue  # a Drive file: the app cannot read the person's Drive
            media_type = text(one.get("contentType") or "application/octet-stream", "type")
            found.append(
                Incoming(
                    name=text(one.get("contentName") or "file", "contentName"),
                    media_type=media_type,
                    size=None,
                    fetch=functools.partial(self._download, str(resource)),
                    voice=media_type.startswith("audio/"),  # a recording: its words wanted
                )
            )
        return found

    async def _download(self, resource: str, into: Download) -> None:
        headers = {"Authorization": f"Bearer {await self._token()}"}
        address = f"{self.api}/v1/media/{resource}"
        try:
            async with self._session_for().get(
                address, params={"alt": "media"}, headers=headers
            ) as response:
                if response.status >= 400:
                    raise TransportError(f"googlechat: a file: {response.status}")
                into.declared(response.content_length)
                await into.write_all(response.content.iter_chunked(CHUNK))
        except TransportError:
            raise
        except _FAILURES as exc:
            raise TransportError(f"googlechat: a file: {exc}") from exc

    # -- replies -------------------------------------------------------------------------

    def _message(
        self, message_text: str, thread_id: str | None, buttons: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"text": message_text}
        if thread_id:
            body["thread"] = {"name": thread_id}
        if buttons:  # an approval's answers; a click comes back as CARD_CLICKED
            body["cardsV2"] = [{"cardId": "answers", "card": {"sections": [{"widgets": [
                {"buttonList": {"buttons": [_button(label) for label in buttons]}}
            ]}]}}]  # fmt: skip
        return body

    async def _create(self, chat_id: str, body: dict[str, Any]) -> str:
        option = "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"
        created = await self._api("POST", f"{chat_id}/messages", body, messageReplyOption=option)
        return str(created["name"])

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: created, then its text updated (see rousseau.streaming)."""
        if message_id is None:
            return await self._create(chat_id, self._message(text, thread_id))
        await self._api("PATCH", message_id, {"text": text}, updateMask="text")
        return message_id

    async def send(self, message: Outbound) -> None:
        said = message.text
        if message.attachment is not None:  # an app cannot upload files: say what it was
            said = "\n".join(t for t in (said, message.attachment.stand_in()) if t)
        if message.replaces is not None and not message.buttons:
            try:
                await self._api("PATCH", message.replaces, {"text": said}, updateMask="text")
                return
            except TransportAuthError:
                raise
            except TransportError:
                pass  # the preview is gone: sent anew
        # A 429 raises Throttled: the outbox sends it again when Google said.
        await self._create(message.chat_id, self._message(said, message.thread_id, message.buttons))

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        pass  # Chat shows no typing for apps

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        """The service account's key exchanged for a token, and one Chat API call with it."""
        try:
            await self._api("GET", "spaces", pageSize="1")
        finally:
            if self._handler is None:
                await self.aclose()
        return str(self.credentials.service_account_email)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _button(label: str) -> dict[str, Any]:
    action = {"function": ANSWER, "parameters": [{"key": "answer", "value": label}]}
    return {"text": label[:40], "onClick": {"action": action}}


def _answer(event: dict[str, Any]) -> str | None:
    """What a pressed answer button says (None for another card's click)."""
    action, common = event.get("action") or {}, event.get("common") or {}
    if ANSWER not in (action.get("actionMethodName"), common.get("invokedFunction")):
        return None
    given = {p.get("key"): p.get("value") for p in action.get("parameters") or []}
    given |= common.get("parameters") or {}
    return text(given["answer"], "answer") if "answer" in given else None


def _mentions_an_app(message: dict[str, Any]) -> bool:
    """Whether the message @-mentions an app (Chat sends an app only its own mentions)."""
    return any(
        a.get("type") == "USER_MENTION"
        and ((a.get("userMention") or {}).get("user") or {}).get("type") == "BOT"
        for a in message.get("annotations") or []
    )


def _seconds(stamp: Any) -> float:
    """An RFC 3339 time as Chat writes it (now, if it is missing or unreadable)."""
    if isinstance(stamp, str):
        try:
            return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


def _error(body: str) -> str:
    try:
        said = json.loads(body)
    except ValueError:
        return body[:200]
    found = said.get("error") if isinstance(said, dict) else None
    return str(found.get("message") if isinstance(found, dict) else found or said)[:200]


def _first(exc: BaseException) -> str:
    """An error's first line, its argument tuple unwrapped (google-auth raises with two)."""
    said = exc.args[0] if exc.args else exc
    return str(said).splitlines()[0][:200] if str(said) else type(exc).__name__
