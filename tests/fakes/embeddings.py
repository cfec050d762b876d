"""A fake OpenAI-compatible embeddings server on 127.0.0.1: POST /v1/embeddings with
{model, input: [texts], encoding_format, dimensions?}, answered with OpenAI's shape
({"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage"}); a bad key answers 401, `fail` answers 500 with OpenAI's error body.

The vectors are the test's choice: each of `meanings` (a word and its axis) adds 1 on that
axis when the text holds the word, and every text gets a small weight on a last axis of its
own so that a text with none of the words is still a vector. Texts that share no word can so
be made close in meaning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.aio import AioServer


@dataclass
class Asked:
    model: str
    texts: list[str]
    dimensions: int | None
    key: str = ""
    ok: bool = False
    """Answered with vectors."""


@dataclass
class FakeEmbeddings(AioServer):
    meanings: dict[str, int] = field(default_factory=dict)
    """word -> axis; words of one meaning share an axis."""
    width: int = 8
    key: str | None = None
    fail: bool = False
    refuse: str | None = None
    """A word whose texts are refused (400), as a text too long for the model is."""
    asked: list[Asked] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._embed)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def vector(self, text: str) -> list[float]:
        words = set(text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split())
        vector = [0.0] * self.width
        for word, axis in self.meanings.items():
            if word in words:
                vector[axis] += 1.0
        vector[-1] += 0.05
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]

    async def _embed(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.asked.append(Asked(body["model"], texts, body.get("dimensions"), key))
        if self.key is not None and key != self.key:
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        if self.fail:
            error = {"message": "The server had an error", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        if self.refuse is not None and any(self.refuse in t for t in texts):
            error = {
                "message": "This model's maximum context length is 8192 tokens",
                "type": "invalid_request_error",
            }
            return web.json_response({"error": error}, status=400)
        self.asked[-1].ok = True
        data = [
            {"object": "embedding", "index": i, "embedding": self.vector(t)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
