"""A fake OpenAI-compatible text-to-speech server on 127.0.0.1: POST /v1/audio/speech with
{model, voice, input, response_format}, answered as OpenAI answers, with the audio itself
(`audio/wav`, `audio/mpeg`... by the format asked): real audio, a tone whose length grows
with the text (SECONDS_PER_CHAR), made with the standard library's `wave`. A bad key answers
401 and `fail` 500, with OpenAI's error body.
"""

from __future__ import annotations

import array
import io
import math
import wave
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.aio import AioServer

SECONDS_PER_CHAR = 0.06
"""About how fast people speak: 1,000 characters in a minute."""
RATE = 24_000
"""The sample rate of OpenAI's speech."""


def tone(seconds: float, rate: int = RATE) -> bytes:
    """A WAV file of a 440 Hz tone, mono 16-bit."""
    count = max(1, int(seconds * rate))
    step = 2 * math.pi * 440 / rate
    samples = array.array("h", (int(9000 * math.sin(step * i)) for i in range(count)))
    out = io.BytesIO()
    with wave.open(out, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(rate)
        audio.writeframes(samples.tobytes())
    return out.getvalue()


@dataclass
class Said:
    model: str
    voice: str
    text: str
    response_format: str
    key: str = ""


@dataclass
class FakeSpeech(AioServer):
    key: str | None = None
    fail: bool = False
    said: list[Said] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/speech", self._speak)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def _speak(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        said = Said(body["model"], body["voice"], body["input"], body.get("response_format", ""))
        said.key = key
        self.said.append(said)
        if self.key is not None and key != self.key:
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        if self.fail:
            error = {"message": "The server had an error", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        if said.response_format not in ("wav", ""):
            error = {"message": "this fake speaks wav only", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        audio = tone(len(said.text) * SECONDS_PER_CHAR)
        return web.Response(body=audio, content_type="audio/wav")
