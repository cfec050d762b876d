"""Microsoft Teams through the Bot Framework protocol, with Microsoft's Teams SDK for Python
(microsoft-teams-apps and microsoft-teams-api, the maintained successor of the retired Bot
Framework SDK): Teams posts each activity to the daemon's messaging endpoint, whose token the
SDK's validator checks (signature by the Bot Framework's published keys, issuer, audience the
app's id, service URL); replies, edits, typing and cards go out through the SDK's connector
client. The app's own token is a client-credentials grant from Microsoft Entra, made here (the
SDK's token manager does it through MSAL, whose blocking calls would hold the loop).

Personal chats are answered; in channels and group chats a message that @-mentions the bot
is, in its thread. Each conversation's service URL is kept, so cron and alerts reach it
later. Approvals come as an Adaptive Card whose buttons answer.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import json
import re
import secrets
import time
import warnings
from collections.abc import Mapping
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from rousseau.agent import MissingExtraError, TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake, media_type_of
from rousseau.media.download import CHUNK
from rousseau.messages import Inbound, InboundHandler, KeyValue, MemoryKeyValue, Outbound
from rousseau.transports.abilities import Posts
from rousseau.transports.base import Throttled, file_bytes, take_files
from rousseau.transports.unreadable import Unreadable, checked, ident, refuse, text

try:
    import aiohttp
    import httpx
    import jwt
    from microsoft_teams.api.activities.message import MessageActivityInput
    from microsoft_teams.api.activities.typing import TypingActivityInput
    from microsoft_teams.api.clients import ApiClient
    from microsoft_teams.api.models import Attachment
    from microsoft_teams.common.http import ClientOptions

    with warnings.catch_warnings():  # the apps package warns, at import, of a preview
        warnings.simplefilter("ignore")  # widget it defines (nothing here uses it)
        from microsoft_teams.apps.auth.token_validator import (
            JwtValidationOptions,
            TokenValidator,
        )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the teams transport", "teams") from exc

log = structlog.get_logger("rousseau.teams")

MAX_LENGTH = 20_000
"""Characters of a message (Teams takes about 28 KB of text)."""
LOGIN = "https://login.microsoftonline.com"
KEYS = "https://login.botframework.com/v1/.well-known/keys"
ISSUER = "https://api.botframework.com"
"""Who signs the tokens of the activities Teams posts."""
SCOPE = "https://api.botframework.com/.default"
SERVICE = "https://smba.trafficmanager.net/teams/"
"""The public cloud's global Bot Connector address, for a conversation not yet heard from."""
ANSWER = "rousseau_answer"
FILE_INFO = "application/vnd.microsoft.teams.file.download.info"
"""A file sent in a personal chat: its content has a download address of its own."""
CONSENT = "application/vnd.microsoft.teams.card.file.consent"
"""The card asking a person to let the bot put a file in their OneDrive."""
SENT_FILE = "application/vnd.microsoft.teams.card.file.info"
"""The card showing a file the bot uploaded."""
CONSENTS = "consents"
"""The state's key: {consent id: the file waiting for its person's yes}."""
INLINE_IMAGE = 1024 * 1024
"""Bytes of an image sent inline (in the message, base64); larger ones go as files."""
MAX_FILE_BYTES = 100 * 1024 * 1024
REFERENCES = "references"
"""The state's key: {conversation: its service URL}, for messages the bot starts."""
CONVERSATIONS = 1000
_FAILURES = (aiohttp.ClientError, OSError, TimeoutError)
_MENTION = re.compile(r"<at>[^<]*</at>", re.IGNORECASE)
_TAGS = re.compile(r"<[^>]+>")


class TeamsTransport:
    name = "teams"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)
    shares_connections = True
    """Teams posts to one address: behind a balancer, every daemon of a cluster takes posts."""

    def __init__(
        self,
        app_id: str,
        app_password: str,
        *,
        listen: str,
        tenant_id: str | None = None,
        path: str = "/api/messages",
        login_endpoint: str | None = None,
        keys_url: str | None = None,
        service_url: str | None = None,
    ) -> None:
        self.app_id, self.app_password = app_id, app_password
        self.service_url = service_url or SERVICE
        """Where a conversation Teams has not yet named a service for is written to."""
        self.tenant = tenant_id or "botframework.com"
        self.login = (login_endpoint or LOGIN).rstrip("/")
        self.validator = TokenValidator(
            JwtValidationOptions(
                valid_issuers=[ISSUER],
                valid_audiences=[app_id, f"api://{app_id}", f"api://botid-{app_id}"],
                jwks_uri=keys_url or KEYS,
            )
        )
        self.state: KeyValue = MemoryKeyValue()
        self.media: MediaIntake | None = None
        self.posts: Posts | None = Posts(
            transport=self.name, listen=listen, path=path, take=self._take_post
        )
        self._handler: InboundHandler | None = None
        self._token = ""
        self._token_until = 0.0
        self._token_lock = anyio.Lock()
        self._clients: dict[str, ApiClient] = {}
        self._stop = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._handler is not None

    def bind_state(self, state: KeyValue) -> None:
        self.state = state

    def bind_media(self, media: MediaIntake) -> None:
        self.media = media

    # -- the app's token -----------------------------------------------------------------

    async def _app_token(self) -> str:
        """The app's token for the Bot Connector, from Entra (client credentials), kept
        until five minutes before it expires."""
        async with self._token_lock:
            if self._token and time.monotonic() < self._token_until:
                return self._token
            form = {
                "grant_type": "client_credentials",
                "client_id": self.app_id,
                "client_secret": self.app_password,
                "scope": SCOPE,
            }
            address = f"{self.login}/{self.tenant}/oauth2/v2.0/token"
            try:
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
                    session.post(address, data=form) as response,
                ):
                    said = await response.json(content_type=None)
            except (*_FAILURES, ValueError) as exc:
                raise TransportError(f"teams: cannot reach {self.login}: {exc}") from exc
            if not isinstance(said, dict):
                said = {"error": str(said)[:200]}
            if response.status >= 400 or "access_token" not in said:
                why = said.get("error_description") or said.get("error")
                reason = str(why).splitlines()[0][:200]
                if response.status in (400, 401) and said.get("error") in (
                    "invalid_client",
                    "unauthorized_client",
                    "invalid_request",
                ):
                    raise TransportAuthError(
                        f"teams.app_password: Entra refused the app's credentials ({reason}); "
                        "set app_id, app_password (a client secret of the bot's app "
                        "registration) and tenant_id"
                    )
                raise TransportError(f"teams: no token from {self.login}: {reason}")
            self._token = str(said["access_token"])
            self._token_until = time.monotonic() + float(said.get("expires_in", 3600)) - 300
            return self._token

    def _client(self, service_url: str) -> ApiClient:
        """The SDK's connector client for one service URL (one per region, a handful)."""
        client = self._clients.get(service_url)
        if client is None:
            with warnings.catch_warnings():  # it makes, itself, a client it has deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                client = ApiClient(service_url, ClientOptions(token=self._app_token))
            self._clients[service_url] = client
        return client

    # -- activities posted by Teams ------------------------------------------------------

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        await self._app_token()  # the credentials prove themselves first
        self._handler = handler
        log.info("teams.connected", app=self.app_id)
        task_status.started()
        try:
            await self._stop.wait()  # the daemon's server takes the posts
        finally:
            self._handler = None

    async def _verified(self, headers: Mapping[str, str], service_url: str) -> bool:
        """Whether the post carries a token the Bot Framework signed for this app and this
        activity's service URL. The SDK's validator fetches the keys with blocking urllib
        (then keeps them): it runs in a worker thread."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            log.warning("teams.post_refused", reason="no bearer token")
            return False
        check = self.validator.validate_token(token, service_url=service_url)
        try:
            await anyio.to_thread.run_sync(asyncio.run, check)
        except (jwt.InvalidTokenError, jwt.PyJWKClientError) as exc:
            log.warning("teams.post_refused", reason=str(exc).splitlines()[0][:200])
            return False
        return True

    async def _take_post(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """One activity: 401 without the Bot Framework's token for it; 200 once it is
        persisted (or is one to skip); 503 when it could not be."""
        try:
            activity = json.loads(body)
            service_url = text(activity.get("serviceUrl"), "serviceUrl")
        except (ValueError, AttributeError, Unreadable):
            activity, service_url = None, ""
        if not await self._verified(headers, service_url):
            return 401, ""
        handler = self._handler
        if handler is None:
            return 503, ""
        if isinstance(activity, dict) and activity.get("name") == "fileConsent/invoke":
            return await self._consented(activity, service_url)
        try:
            inbound = self._read(activity)
            files = self._files(activity) if inbound is not None else []
        except (Unreadable, ValueError, TypeError, KeyError, AttributeError) as exc:
            refuse(self, exc if isinstance(exc, Unreadable) else Unreadable(str(exc)))
            return 200, ""
        if inbound is None:
            return 200, ""
        try:
            await self._remember(inbound.chat_id, service_url)
            inbound = await take_files(inbound, self.media, files, unavailable=(TransportError,))
            await handler(inbound)
        except Exception as exc:
            log.info("teams.post_retry", message=inbound.message_id, error=type(exc).__name__)
            return 503, ""
        return 200, ""

    def _read(self, activity: Any) -> Inbound | None:
        """An activity as the router takes it; None for one not to answer (a conversation
        update, the bot's own, a reaction)."""
        if not isinstance(activity, dict):
            raise Unreadable("the activity is not an object")
        if activity.get("type") != "message":
            return None
        sender = activity.get("from") or {}
        conversation = activity.get("conversation") or {}
        if sender.get("id") == (activity.get("recipient") or {}).get("id"):
            return None
        whole = ident(conversation.get("id"), "conversation.id")
        chat, _, thread = whole.partition(";messageid=")
        personal = conversation.get("conversationType", "personal") == "personal"
        value = activity.get("value")
        if isinstance(value, dict) and ANSWER in value:  # an answer card's button
            said, mentioned = text(value[ANSWER], "answer"), True
        else:
            raw = text(activity.get("text"), "text")
            said = _TAGS.sub("", _MENTION.sub("", raw)).replace("&nbsp;", " ").strip()
            mentioned = personal or self._mentioned(activity)
            if not said and not self._files(activity):
                return None
        who = sender.get("aadObjectId") or sender.get("id")
        inbound = Inbound(
            transport=self.name,
            chat_id=chat,
            sender_id=ident(who, "from.aadObjectId"),
            message_id=ident(activity.get("id"), "id"),
            text=said,
            is_group=not personal,
            mentioned=mentioned,
            thread_id=None if personal else (thread or ident(activity.get("id"), "id")),
            sender_name=text(sender.get("name"), "from.name"),
            at=_seconds(activity.get("timestamp")),
        )
        return checked(inbound)

    def _files(self, activity: dict[str, Any]) -> list[Incoming]:
        """The files sent in a personal chat, each with its own download address (a
        pre-authorised link); inline images and cards are not files here."""
        if self.media is None:
            return []
        found = []
        for one in activity.get("attachments") or []:
            if not isinstance(one, dict) or one.get("contentType") != FILE_INFO:
                continue
            name = text(one.get("name") or "file", "attachment name")
            address = text((one.get("content") or {}).get("downloadUrl"), "downloadUrl")
            media_type = media_type_of(name=name)
            found.append(
                Incoming(
                    name=name,
                    media_type=media_type,
                    size=None,
                    fetch=functools.partial(_download, address),
                    voice=media_type.startswith("audio/"),  # a recording: its words wanted
                )
            )
        return found

    def _mentioned(self, activity: dict[str, Any]) -> bool:
        """Whether the bot is among the activity's mentions."""
        me = (activity.get("recipient") or {}).get("id")
        return any(
            e.get("type") == "mention"
            and (e.get("mentioned") or {}).get("id") in (me, f"28:{self.app_id}")
            for e in activity.get("entities") or []
            if isinstance(e, dict)
        )

    async def _remember(self, chat: str, service_url: str) -> None:
        """The conversation's service URL, for the messages the bot starts there later."""
        known = json.loads(await self.state.get(REFERENCES) or "{}")
        if known.get(chat) != service_url:
            known.pop(chat, None)
            known[chat] = service_url
            while len(known) > CONVERSATIONS:
                known.pop(next(iter(known)))
            await self.state.set(REFERENCES, json.dumps(known))

    async def _service_url(self, chat: str) -> str:
        """The conversation's own service URL, as Teams last gave it; else the global one
        (which reaches any conversation of the public cloud the bot is installed in)."""
        found = json.loads(await self.state.get(REFERENCES) or "{}").get(chat)
        return str(found or self.service_url)

    # -- replies -------------------------------------------------------------------------

    @staticmethod
    def _conversation(chat_id: str, thread_id: str | None) -> str:
        return f"{chat_id};messageid={thread_id}" if thread_id else chat_id

    async def preview(
        self, chat_id: str, thread_id: str | None, text: str, *, message_id: str | None
    ) -> str:
        """A reply as it is written: sent, then the activity updated (see rousseau.streaming)."""
        client = self._client(await self._service_url(chat_id))
        conversation = self._conversation(chat_id, thread_id)
        try:
            if message_id is None:
                sent = await client.conversations.create_activity(
                    conversation, MessageActivityInput(text=text)
                )
                return str(sent.id)
            await client.conversations.update_activity(
                conversation, message_id, MessageActivityInput(text=text)
            )
            return message_id
        except TransportError:
            raise
        except httpx.HTTPStatusError as exc:
            raise _refused(exc, "a preview failed") from exc
        except Exception as exc:
            raise TransportError(f"teams: a preview failed: {_said(exc)}") from exc

    async def send(self, message: Outbound) -> None:
        client = self._client(await self._service_url(message.chat_id))
        conversation = self._conversation(message.chat_id, message.thread_id)
        said = message.text
        activity = MessageActivityInput(text=said)
        if message.attachment is not None:
            said = await self._attach(activity, message)
        if message.buttons:
            activity.add_attachments(_answers_card(said, message.buttons))
        try:
            if message.replaces is not None and not message.buttons:
                try:
                    await client.conversations.update_activity(
                        conversation, message.replaces, activity
                    )
                    return
                except TransportError:
                    raise
                except Exception:
                    pass  # the preview is gone: sent anew
            await self._create(client, conversation, activity)
        except (TransportError, Throttled):
            raise
        except Exception as exc:
            raise TransportError(f"teams: sending failed: {_said(exc)}") from exc

    async def _attach(self, activity: Any, message: Outbound) -> str:
        """The file of `message` on `activity`: an image inline; another file, in a personal
        chat, as a card asking its person to let the bot put it in their OneDrive (the file
        goes once they say yes); elsewhere named in the text, as bots cannot upload there.
        The activity's text."""
        attachment = message.attachment
        assert attachment is not None
        data = await file_bytes(self.media, message)
        if isinstance(data, Outbound):  # the file is gone from the store: said so
            activity.text = data.text
            return data.text
        name = attachment.name or "file"
        if attachment.is_image and len(data) <= INLINE_IMAGE:
            address = f"data:{attachment.media_type};base64,{base64.b64encode(data).decode()}"
            activity.add_attachments(
                Attachment(content_type=attachment.media_type, content_url=address, name=name)
            )
            return str(activity.text or "")
        if message.thread_id or message.chat_id.startswith("19:"):
            said = "\n".join(t for t in (message.text, attachment.stand_in()) if t)
            activity.text = said
            return said
        consent = secrets.token_hex(8)
        waiting = json.loads(await self.state.get(CONSENTS) or "{}")
        waiting[consent] = {"sha256": attachment.sha256, "name": name}
        while len(waiting) > CONVERSATIONS:
            waiting.pop(next(iter(waiting)))
        await self.state.set(CONSENTS, json.dumps(waiting))
        card = {
            "description": name,
            "sizeInBytes": len(data),
            "acceptContext": {"consent": consent},
            "declineContext": {"consent": consent},
        }
        activity.add_attachments(Attachment(content_type=CONSENT, name=name, content=card))
        return str(activity.text or "")

    async def _consented(self, activity: dict[str, Any], service_url: str) -> tuple[int, str]:
        """A person's answer to a file's consent card: on yes, the file uploaded to the
        address Teams gives and shown in the chat; the invoke answered 200 either way."""
        value = activity.get("value") or {}
        consent = str((value.get("context") or {}).get("consent", ""))
        waiting = json.loads(await self.state.get(CONSENTS) or "{}")
        file = waiting.pop(consent, None)
        await self.state.set(CONSENTS, json.dumps(waiting))
        chat = str((activity.get("conversation") or {}).get("id", "")).partition(";")[0]
        if file is None or value.get("action") != "accept" or self.media is None:
            return 200, ""
        data = await self.media.blobs.read(file["sha256"])
        info = value.get("uploadInfo") or {}
        if data is None or not info.get("uploadUrl"):
            return 200, ""
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session,
                session.put(
                    str(info["uploadUrl"]),
                    data=data,
                    headers={"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"},
                ) as response,
            ):
                if response.status >= 400:
                    raise TransportError(f"teams: the upload answered {response.status}")
        except (*_FAILURES, TransportError) as exc:
            log.warning("teams.upload_failed", chat=chat, error=str(exc)[:200])
            return 500, ""  # Teams tells the person, who can say yes again
        shown = MessageActivityInput(text="")
        shown.add_attachments(
            Attachment(
                content_type=SENT_FILE,
                content_url=str(info.get("contentUrl", "")),
                name=str(info.get("name") or file["name"]),
                content={"uniqueId": info.get("uniqueId"), "fileType": info.get("fileType")},
            )
        )
        try:
            await self._create(self._client(service_url), chat, shown)
        except Exception as exc:
            log.warning("teams.file_card_failed", chat=chat, error=_said(exc))
        return 200, ""

    async def _create(self, client: ApiClient, conversation: str, activity: Any) -> None:
        """The activity sent (a 429 raises Throttled: the outbox sends it again when the
        Connector said)."""
        try:
            await client.conversations.create_activity(conversation, activity)
        except httpx.HTTPStatusError as exc:
            raise _refused(exc, "sending failed") from exc

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        client = self._client(await self._service_url(chat_id))
        try:
            await client.conversations.create_activity(
                self._conversation(chat_id, thread_id), TypingActivityInput()
            )
        except TransportError:
            raise
        except Exception as exc:
            raise TransportError(f"teams: typing failed: {_said(exc)}") from exc

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        """The app's credentials exchanged for a Bot Connector token."""
        await self._app_token()
        return f"app {self.app_id}"

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:  # the SDK's client has no close of its own: its httpx one
            await client.http.http.aclose()


async def _download(address: str, into: Download) -> None:
    """A file by its pre-authorised address (no token goes with it)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
            session.get(address) as response,
        ):
            if response.status >= 400:
                raise TransportError(f"teams: a file: {response.status}")
            into.declared(response.content_length)
            await into.write_all(response.content.iter_chunked(CHUNK))
    except _FAILURES as exc:
        raise TransportError(f"teams: a file: {exc}") from exc


def _answers_card(said: str, buttons: tuple[str, ...]) -> Attachment:
    """An Adaptive Card with a button per answer; a press posts `{ANSWER: label}` back."""
    card = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.4",
        "body": [{"type": "TextBlock", "text": said[:2000], "wrap": True}],
        "actions": [
            {"type": "Action.Submit", "title": label[:80], "data": {ANSWER: label}}
            for label in buttons
        ],
    }
    return Attachment(content_type="application/vnd.microsoft.card.adaptive", content=card)


def _seconds(stamp: Any) -> float:
    if isinstance(stamp, str):
        try:
            return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


def _refused(exc: httpx.HTTPStatusError, doing: str) -> TransportError | Throttled:
    """The Connector's refusal: Throttled for a 429 (its Retry-After), else a TransportError
    with the status."""
    status = exc.response.status_code
    if status == 429:
        return Throttled.asked(exc.response.headers, "Retry-After")
    return TransportError(f"teams: {doing}: the Bot Connector answered {status}")


def _said(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
