"""Voice notes into text, through any OpenAI-compatible `/audio/transcriptions` endpoint
(OpenAI, Groq, a local whisper server) with the openai SDK."""

from __future__ import annotations

from typing import Any

from rousseau.agent import MissingExtraError, ProviderError


class Transcriber:
    """Turns audio bytes into text; built from `media.transcription`."""

    def __init__(
        self, *, base_url: str, api_key: str | None, model: str, timeout: float = 120.0
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise MissingExtraError("voice transcription", "openai") from exc
        self.model = model
        self.base_url = base_url
        self._client: Any = openai.AsyncOpenAI(
            api_key=api_key or "unused", base_url=base_url, timeout=timeout, max_retries=1
        )

    async def transcribe(self, data: bytes, *, name: str, media_type: str) -> str:
        """The text spoken; ProviderError naming the endpoint when it cannot be had."""
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

    async def aclose(self) -> None:
        await self._client.close()
