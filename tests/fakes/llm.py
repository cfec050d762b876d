"""A fake model server on 127.0.0.1 speaking Anthropic's Messages and OpenAI's chat-completions
wire formats, plain JSON and server-sent events. The real SDKs talk to it over HTTP.

Replies are scripted (`push`) or computed (`responder`); every request is recorded.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import HTTPServer

_ids = itertools.count(1)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.time)


@dataclass
class JSONReply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SSEReply:
    events: list[tuple[str | None, Any]]
    """(event name or None, data); data is JSON-encoded unless it is a str."""
    pace: float = 0.0
    """Seconds between two events: a model writing slowly."""


@dataclass
class BinaryReply:
    body: bytes
    content_type: str
    status: int = 200


@dataclass
class Sleep:
    """Wait this long, then send `then`."""

    seconds: float
    then: JSONReply | SSEReply | BinaryReply


Reply = JSONReply | SSEReply | BinaryReply | Sleep


class FakeLLMServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: deque[Reply] = deque()
        self.responder: Callable[[Recorded], Reply] | None = None
        self.routes: dict[str, Callable[[Recorded], Reply]] = {}
        self.first_tokens: list[float] = []
        """When each streamed reply's first content event went out."""
        """Path prefixes answered by a function instead of the scripted queue."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._record(self, {})
                if self.path.rstrip("/").endswith("/models") or "/models?" in self.path:
                    server._send(self, JSONReply(_models()))
                else:
                    server._send(self, JSONReply({"error": {"message": "not found"}}, 404))

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", errors="replace")}
                recorded = server._record(self, body)
                route = next((f for p, f in server.routes.items() if self.path.startswith(p)), None)
                server._send(self, route(recorded) if route else server._next(recorded))

        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # Clients that give up (timeouts, cancelled turns) reset connections: not an error.
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def posts(self) -> list[Recorded]:
        """POSTs that took a scripted reply (routes such as token endpoints left out)."""
        return [
            r
            for r in self.requests
            if r.method == "POST" and not any(r.path.startswith(p) for p in self.routes)
        ]

    def _record(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> Recorded:
        recorded = Recorded(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(recorded)
        return recorded

    def _next(self, recorded: Recorded) -> Reply:
        with self._lock:
            if self.replies:
                return self.replies.popleft()
        if self.responder is not None:
            return self.responder(recorded)
        return JSONReply({"error": {"type": "api_error", "message": "no scripted reply"}}, 500)

    def _send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if isinstance(reply, Sleep):
            time.sleep(reply.seconds)
            reply = reply.then
        if isinstance(reply, BinaryReply):
            handler.send_response(reply.status)
            handler.send_header("content-type", reply.content_type)
            handler.send_header("content-length", str(len(reply.body)))
            handler.end_headers()
            handler.wfile.write(reply.body)
            return
        if isinstance(reply, JSONReply):
            data = json.dumps(reply.body).encode()
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for k, v in reply.headers.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(data)
            return
        chunks = []
        for name, data in reply.events:
            payload = data if isinstance(data, str) else json.dumps(data)
            prefix = f"event: {name}\n" if name else ""
            chunks.append(f"{prefix}data: {payload}\n\n".encode())
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("content-length", str(sum(len(c) for c in chunks)))
        handler.end_headers()
        for i, chunk in enumerate(chunks):
            if i and reply.pace:
                time.sleep(reply.pace)
            handler.wfile.write(chunk)
            handler.wfile.flush()
            if i == 1:
                self.first_tokens.append(time.time())


def _models() -> dict[str, Any]:
    model = {
        "id": "fake-model",
        "type": "model",
        "display_name": "Fake",
        "created_at": "2025-01-01T00:00:00Z",
        "object": "model",
        "created": 0,
        "owned_by": "test",
    }
    return {
        "data": [model],
        "object": "list",
        "has_more": False,
        "first_id": "fake-model",
        "last_id": "fake-model",
    }


# -- Anthropic wire format -----------------------------------------------------------------


def anthropic_message(
    *blocks: dict[str, Any],
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_write: int = 0,
) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write,
        },
    }


def a_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def a_tool(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids)}", "name": name, "input": input}


def anthropic_stream(message: dict[str, Any], chunk: int = 4) -> SSEReply:
    """The event sequence the Messages API streams for `message`."""
    start = dict(message, content=[], stop_reason=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            text = block["text"]
            for j in range(0, len(text), chunk):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": text[j : j + chunk]},
                        },
                    )
                )
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": dict(block, input={}),
                    },
                )
            )
            raw = json.dumps(block["input"])
            for j in range(0, len(raw), chunk):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": raw[j : j + chunk],
                            },
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return SSEReply(events)


def anthropic_error(status: int, message: str, kind: str = "api_error") -> JSONReply:
    return JSONReply({"type": "error", "error": {"type": kind, "message": message}}, status)


# -- OpenAI wire format --------------------------------------------------------------------


def openai_completion(
    text: str | None = None,
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    *,
    finish_reason: str | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for name, args in tool_calls or []
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def openai_stream(completion: dict[str, Any], chunk: int = 4) -> SSEReply:
    """The chunks a streamed chat completion sends for `completion`, usage last."""
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def event(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        return (
            None,
            dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}]),
        )

    choice = completion["choices"][0]
    message = choice["message"]
    events: list[tuple[str | None, Any]] = [event({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    for j in range(0, len(text), chunk):
        events.append(event({"content": text[j : j + chunk]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        events.append(
            event(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = fn["arguments"]
        for j in range(0, len(args), chunk):
            events.append(
                event(
                    {
                        "tool_calls": [
                            {"index": index, "function": {"arguments": args[j : j + chunk]}}
                        ]
                    }
                )
            )
    events.append(event({}, choice["finish_reason"]))
    events.append((None, dict(base, choices=[], usage=completion["usage"])))
    events.append((None, "[DONE]"))
    return SSEReply(events)


def openai_error(status: int, message: str) -> JSONReply:
    return JSONReply({"error": {"message": message, "type": "error", "code": None}}, status)


# -- AWS Bedrock wire format ---------------------------------------------------------------


def _event_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude, its CRC, string headers, payload, message CRC."""
    encoded = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + len(v.encode()).to_bytes(2, "big") + v.encode()
        for k, v in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def bedrock_stream(message: dict[str, Any]) -> BinaryReply:
    """What invoke-with-response-stream sends: each Messages event as a base64 chunk frame."""
    frames = []
    for _name, data in anthropic_stream(message).events:
        chunk = {"bytes": base64.b64encode(json.dumps(data).encode()).decode()}
        frames.append(
            _event_frame(
                {
                    ":event-type": "chunk",
                    ":content-type": "application/json",
                    ":message-type": "event",
                },
                json.dumps(chunk).encode(),
            )
        )
    return BinaryReply(b"".join(frames), "application/vnd.amazon.eventstream")


def google_token(recorded: Recorded) -> JSONReply:
    """An OAuth token endpoint, for google-auth refreshing authorized-user credentials."""
    return JSONReply(
        {"access_token": "ya29.fake-token", "expires_in": 3600, "token_type": "Bearer"}
    )
