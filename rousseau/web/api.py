"""The OpenAI-compatible API: `GET /v1/models` (one model per agent) and
`POST /v1/chat/completions` (plain, or streamed as server-sent events), so the official
SDKs, Open WebUI or an editor plugin talk to a rousseau agent, with its tools, approvals
and memory.

A call is a message on the `api` transport, answered through the router like any chat.
Its conversation is a rousseau session keyed by the key's owner and the request's `user`
(or an `X-Session-Id` header): rousseau keeps the history, so of the messages sent only the
last user message is new to it. Calls of one conversation take turns.
"""

from __future__ import annotations

import functools
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rousseau.agent import Usage
from rousseau.messages import Inbound
from rousseau.web.app import dumps, json_error
from rousseau.web.auth import same
from rousseau.web.face import Face

if TYPE_CHECKING:
    from rousseau.config import WebKeyConfig
    from rousseau.state.backend import Backend
    from rousseau.web.chat import Event, WebChat

log = structlog.get_logger("rousseau.web")

REPLY_TIMEOUT = 3600.0
"""The longest a call waits for its answer (a turn may wait for a human approval)."""
CONVERSATIONS_KEPT = 10_000
"""Per-conversation turn locks kept at once (the least recently used go first)."""
_USER = re.compile(r"[^A-Za-z0-9_.@:-]")


def _key(request: Request) -> WebKeyConfig | None:
    face: Face = request.app.state.face
    assert face.config is not None
    scheme, _, sent = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not sent:
        return None
    for key in face.config.api_keys:
        if same(sent.strip(), key.key.get_secret_value()):
            return key
    return None


def _models(face: Face, key: WebKeyConfig) -> list[str]:
    return [key.agent] if key.agent else list(face.agents)


def keyed(
    handler: Callable[[Request, WebKeyConfig], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """An API route for callers with a configured key (401 in OpenAI's shape otherwise)."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        key = _key(request)
        if key is None:
            return json_error(
                401, "a valid API key is needed (Authorization: Bearer KEY)", "invalid_api_key"
            )
        return await handler(request, key)

    return endpoint


@keyed
async def models(request: Request, key: WebKeyConfig) -> Response:
    face: Face = request.app.state.face
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "rousseau"}
                for name in _models(face, key)
            ],
        }
    )


def _last_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: their text
                texts = [
                    p.get("text")
                    for p in content
                    if isinstance(p, dict) and p.get("type") == "text"
                ]
                return "\n".join(t for t in texts if isinstance(t, str) and t)
            return None
    return None


class Conversations:
    """One turn at a time per conversation, so each call gets its own answer."""

    def __init__(self) -> None:
        self._locks: OrderedDict[str, anyio.Lock] = OrderedDict()

    def lock(self, chat_id: str) -> anyio.Lock:
        found = self._locks.pop(chat_id, None) or anyio.Lock()
        self._locks[chat_id] = found
        while len(self._locks) > CONVERSATIONS_KEPT:
            oldest, held = next(iter(self._locks.items()))
            if held.locked():
                break
            del self._locks[oldest]
        return found


@keyed
async def completions(request: Request, key: WebKeyConfig) -> Response:
    face: Face = request.app.state.face
    assert face.api is not None
    try:
        body = await request.json()
    except ValueError:
        return json_error(400, "the body is not JSON", "invalid_request_error")
    if not isinstance(body, dict):
        return json_error(400, "the body is not a JSON object", "invalid_request_error")
    text = _last_user_text(body.get("messages"))
    if not text:
        return json_error(400, "messages has no user message with text", "invalid_request_error")
    model = str(body.get("model") or "")
    offered = _models(face, key)
    agent = model if model in offered else None
    if agent is None:
        if key.agent or model:
            return json_error(
                404, f"no model {model!r}: this key offers {', '.join(offered)}", "model_not_found"
            )
        agent = offered[0]
    who = str(body.get("user") or request.headers.get("x-session-id") or "")
    chat_id = key.owner + (f"/{_USER.sub('_', who)[:64]}" if who else "")
    assert face.conversations is not None and face.backend is not None
    options = body.get("stream_options")
    call = _Call(
        face.api,
        face.backend,
        face.conversations.lock(chat_id),
        chat_id,
        key.owner,
        agent,
        text,
        streams_usage=isinstance(options, dict) and options.get("include_usage") is True,
    )
    if body.get("stream"):
        return StreamingResponse(
            call.chunks(), media_type="text/event-stream", headers={"cache-control": "no-store"}
        )
    try:
        answer = await call.answer()
    except TimeoutError:
        return json_error(504, "no answer in time", "timeout")
    except RuntimeError as exc:
        return json_error(503, str(exc), "unavailable")
    return JSONResponse(
        {
            "id": call.id,
            "object": "chat.completion",
            "created": call.created,
            "model": agent,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": call.usage_json(),
        }
    )


class _Call:
    def __init__(
        self,
        api: WebChat,
        backend: Backend,
        lock: anyio.Lock,
        chat_id: str,
        owner: str,
        agent: str,
        text: str,
        *,
        streams_usage: bool,
    ) -> None:
        self.api, self.lock, self.chat_id = api, lock, chat_id
        self.owner, self.agent, self.text = owner, agent, text
        self.backend = backend
        """Where the conversation's session, and so what its turn cost, is read."""
        self.streams_usage = streams_usage
        """A streamed call ends with a usage chunk (`stream_options.include_usage`)."""
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.usage = Usage()
        """The tokens of this call's turn, every model request of it (tool steps too)."""

    async def _events(self) -> AsyncIterator[Event]:
        """The previews of this call's answer, then its final message (the turn lock held,
        so every preview in the chat is this call's, and so is the usage that came since)."""
        async with self.lock, self.api.listen(self.chat_id) as received:
            before = await self._spent()
            asked = await self.api.say(self.chat_id, self.owner, self.text, agent=self.agent)
            with anyio.fail_after(REPLY_TIMEOUT):
                async for event in received:
                    if event.kind == "preview":
                        yield event
                    elif event.kind == "message" and event.reply_to == asked:
                        self.usage = _since(before, await self._spent())
                        yield event
                        return

    async def _spent(self) -> Usage:
        """What the conversation's session has cost so far: a turn's history (and its usage)
        is written before its answer, so the answer finds its own turn counted."""
        key = Inbound(
            transport=self.api.name,
            chat_id=self.chat_id,
            sender_id=self.owner,
            message_id="",
            text="",
            agent=self.agent,
        ).session_key
        session_id = await self.backend.state.session_for(key)
        info = await self.backend.store.info(session_id) if session_id else None
        return info.usage if info is not None else Usage()

    def usage_json(self) -> dict[str, Any]:
        """The usage in OpenAI's shape."""
        u = self.usage
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens  # all it read
        completion = u.output_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": self.usage.cache_read_tokens},
        }

    async def answer(self) -> str:
        final = ""
        async for event in self._events():
            final = event.text
        return final

    async def chunks(self) -> AsyncIterator[str]:
        """The answer as chat.completion.chunk events. A preview that does not carry on
        from what was sent (the model started a new step after a tool call) is sent after
        a blank line: what streamed cannot be taken back."""
        sent = ""
        yield self._chunk({"role": "assistant", "content": ""})
        try:
            async for event in self._events():
                if event.text.startswith(sent):
                    delta = event.text[len(sent) :]
                else:
                    delta = "\n\n" + event.text
                sent = event.text
                if delta:
                    yield self._chunk({"content": delta})
        except (TimeoutError, RuntimeError) as exc:
            log.warning("web.api_failed", error=str(exc))
            yield self._chunk({}, finish="error")
        else:
            yield self._chunk({}, finish="stop")
            if self.streams_usage:
                yield self._usage_chunk()
        yield "data: [DONE]\n\n"

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        return self._event(choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

    def _usage_chunk(self) -> str:
        return self._event(choices=[], usage=self.usage_json())

    def _event(self, **fields: Any) -> str:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.agent,
            **fields,
        }
        return f"data: {dumps(chunk)}\n\n"


def _since(before: Usage, now: Usage) -> Usage:
    """The usage added between two readings (none where the session changed, as `/new`
    does, between them)."""
    return Usage(
        input_tokens=max(0, now.input_tokens - before.input_tokens),
        output_tokens=max(0, now.output_tokens - before.output_tokens),
        cache_read_tokens=max(0, now.cache_read_tokens - before.cache_read_tokens),
        cache_write_tokens=max(0, now.cache_write_tokens - before.cache_write_tokens),
    )


def routes() -> list[Route]:
    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]
