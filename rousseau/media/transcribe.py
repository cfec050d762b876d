"""Voice notes into text, through any OpenAI-compatible `/audio/transcriptions` endpoint
(OpenAI, Groq, a local whisper server) with the openai SDK."""

from __future__ import annotations

import importlib.util
from typing import Any

import anyio

from rousseau.agent import MissingExtraError, ProviderError


class Transcriber:
    """Turns audio bytes into text; built from `media.transcription`. The SDK is imported
    and its client made at the first voice note, in a thread, not at start-up."""

    def __init__(
        self, *, base_url: str, api_key: str | None, model: str, timeout: float = 120.0
    ) -> None:
        if importlib.util.find_spec("openai") is None:
            raise MissingExtraError("voice transcription", "openai")
        self.model = model
        self.base_url = base_url
        self._options: dict[str, Any] = {
            "api_key": api_key or "unused",
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": 1,
        }
        self._client: Any = None

    async def transcribe(self, data: bytes, *, name: str, media_type: str) -> str:
        """The text spoken; ProviderError naming the endpoint when it cannot be had."""
        if self._client is None:
            self._client = await anyio.to_thread.run_sync(self._make_client)
        import openai

        try:
            result = await self._client.audio.transcriptions.create(
                file=(name, data, media_type), model=self.model
            )
        except openai.APIError as exc:
            raise ProviderError(
                "transcription", f"{self.base_url}: {exc} (check media.transcription)"
            ) from exc
        return str(getattr(result, "text", "") or "").strip()

    def _make_client(self) -> Any:
        import openai

        return openai.AsyncOpenAI(**self._options)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
