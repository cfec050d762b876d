"""Fake search backends on 127.0.0.1, one per provider web_search speaks to, each answering
the requests and shapes of the provider's API documentation:

- SearXNG: GET /search?q=...&format=json; 403 when `json` is not in its search.formats;
  `results[].title/url/content`, `unresponsive_engines`.
- Brave Search: GET /res/v1/web/search?q=...&count=N with X-Subscription-Token; an unknown
  token answers 422 with error.code SUBSCRIPTION_TOKEN_INVALID; `web.results[].title/url/
  description` (descriptions carry <strong> tags).
- Tavily: POST /search with a JSON body {query, max_results} and `Authorization: Bearer
  KEY`; an unknown key answers 401 {"detail": {"error": ...}}; `results[].title/url/content`.

Every request is recorded (`asked`); `fail` switches a failure on: "401", "429" (with
Retry-After), "500", "slow" (no answer until the server stops) or "garbage" (200, HTML).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from urllib.parse import urlparse

import anyio
from aiohttp import web

from tests.fakes.aio import AioServer

Failure = Literal["401", "429", "500", "slow", "garbage"]


@dataclass
class Result:
    title: str
    url: str
    snippet: str


@dataclass
class Asked:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any
    """The JSON body (None without one)."""


RESULTS = [
    Result("Rousseau — Wikipedia", "https://en.wikipedia.org/wiki/Rousseau", "Philosopher."),
    Result("The Social Contract", "https://example.org/contract", "Man is born free."),
    Result("Émile, or On Education", "https://example.org/emile", "A treatise on education."),
]


class FakeSearch(AioServer):
    method: ClassVar[str]
    path: ClassVar[str]

    def __init__(self, key: str | None = None, results: list[Result] | None = None) -> None:
        super().__init__()
        self.key = key
        self.results = list(RESULTS if results is None else results)
        self.asked: list[Asked] = []
        self.fail: Failure | None = None
        self.retry_after: str | None = "7"
        """The Retry-After of a 429 (None: none sent)."""
        self._released = threading.Event()

    def routes(self, app: web.Application) -> None:
        app.router.add_route(self.method, self.path, self._handle)

    def stop(self) -> None:
        self._released.set()
        super().stop()

    def connections(self) -> int:
        """Connections a client holds open to this server."""
        return sum(not t.is_closing() for t in list(self._transports))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.asked.append(
            Asked(
                method=request.method,
                path=request.path,
                params=dict(request.query),
                headers=dict(request.headers),
                body=json.loads(body) if body else None,
            )
        )
        if self.fail == "slow":
            deadline = time.monotonic() + 30
            while not self._released.is_set() and time.monotonic() < deadline:
                await anyio.sleep(0.02)
            return web.Response(status=504)
        if self.fail == "401":
            return web.json_response({"detail": "Unauthorized"}, status=401)
        if self.fail == "429":
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.json_response({"detail": "Too many requests"}, status=429, headers=headers)
        if self.fail == "500":
            return web.Response(
                status=500, text="<html><body><h1>Internal Server Error</h1></body></html>"
            )
        if self.fail == "garbage":
            return web.Response(
                text="<!doctype html><html><title>Login</title><p>Sign in</p></html>",
                content_type="text/html",
            )
        return await self.answer(request)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError


class FakeSearXNG(FakeSearch):
    method = "GET"
    path = "/search"

    def __init__(self, results: list[Result] | None = None) -> None:
        super().__init__(None, results)
        self.formats = ["html", "json"]
        """Its settings.yml's search.formats."""
        self.unresponsive: list[list[str]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        fmt = request.query.get("format", "html")
        if fmt not in self.formats:
            return web.Response(status=403, text="403 Forbidden")
        if fmt != "json" or not request.query.get("q"):
            return web.Response(status=400, text="Bad Request")
        results = [
            {
                "url": r.url,
                "title": r.title,
                "content": r.snippet,
                "engine": "duckduckgo",
                "engines": ["duckduckgo", "wikipedia"],
                "positions": [i + 1],
                "score": 1.0 / (i + 1),
                "category": "general",
                "parsed_url": list(urlparse(r.url)),
                "template": "default.html",
            }
            for i, r in enumerate(self.results)
        ]
        return web.json_response(
            {
                "query": request.query["q"],
                "number_of_results": len(results),
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": self.unresponsive,
            }
        )


class FakeBrave(FakeSearch):
    method = "GET"
    path = "/res/v1/web/search"

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-Subscription-Token") != self.key:
            return self._error(422, "SUBSCRIPTION_TOKEN_INVALID", "The provided token is invalid.")
        query = request.query.get("q", "")
        count = request.query.get("count", "20")
        if not query or not count.isdigit() or not 1 <= int(count) <= 20:
            return self._error(422, "VALIDATION", "Unable to validate request parameter(s)")
        if not self.results:
            return web.json_response({"type": "search", "query": {"original": query}})
        results = [
            {
                "type": "search_result",
                "title": r.title,
                "url": r.url,
                "description": r.snippet,
                "is_source_local": False,
                "language": "en",
                "family_friendly": True,
                "extra_snippets": [],
            }
            for r in self.results[: int(count)]
        ]
        return web.json_response(
            {
                "type": "search",
                "query": {"original": query, "more_results_available": True},
                "mixed": {"type": "mixed", "main": []},
                "web": {"type": "search", "results": results, "family_friendly": True},
            },
            headers={"X-RateLimit-Limit": "1, 15000", "X-RateLimit-Remaining": "0, 14999"},
        )

    @staticmethod
    def _error(status: int, code: str, detail: str) -> web.Response:
        error = {"id": str(uuid.uuid4()), "status": status, "code": code, "detail": detail}
        return web.json_response(
            {"type": "ErrorResponse", "error": {**error, "meta": {}}, "time": int(time.time())},
            status=status,
        )


class FakeTavily(FakeSearch):
    method = "POST"
    path = "/search"

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            error = {"error": "Unauthorized: missing or invalid API key."}
            return web.json_response({"detail": error}, status=401)
        asked = self.asked[-1].body
        if not isinstance(asked, dict) or not asked.get("query"):
            return web.json_response({"detail": {"error": "Invalid request"}}, status=400)
        count = asked.get("max_results", 5)
        results = [
            {
                "title": r.title,
                "url": r.url,
                "content": r.snippet,
                "score": 0.9,
                "raw_content": None,
            }
            for r in self.results[:count]
        ]
        return web.json_response(
            {
                "query": asked["query"],
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.42,
                "request_id": str(uuid.uuid4()),
            }
        )
