"""Text to vectors through an OpenAI-compatible /embeddings endpoint (OpenAI, Ollama, a
local server), with the openai SDK: its client, retries and errors, turned into the
ProviderError family like the chat providers'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rousseau.agent import ProviderError

if TYPE_CHECKING:
    from rousseau.config.sections import EmbeddingsConfig

MAX_CHARS = 8_000  # of one text: embedding models take a few thousand tokens at most
SECTION = "embeddings"


class Embeddings:
    """One endpoint and model; the SDK is imported at the first request."""

    def __init__(self, config: EmbeddingsConfig) -> None:
        self.model = config.model
        self.base_url = config.base_url
        self.dimensions = config.dimensions
        self._key = config.api_key.get_secret_value() if config.api_key else "unused"
        self._timeout = config.timeout
        self._client: Any = None

    def _sdk(self) -> Any:
        if self._client is None:
            from rousseau.agent import MissingExtraError

            try:
                import openai
            except ImportError as exc:
                raise MissingExtraError("embeddings", "embeddings") from exc
            self._client = openai.AsyncOpenAI(
                api_key=self._key, base_url=self.base_url, timeout=self._timeout, max_retries=1
            )
        return self._client

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; ProviderError when the endpoint fails."""
        import openai

        client = self._sdk()
        body: dict[str, Any] = {
            "model": self.model,
            "input": [t[:MAX_CHARS] or " " for t in texts],
            "encoding_format": "float",
        }
        if self.dimensions:
            body["dimensions"] = self.dimensions
        try:
            # The SDK's own post, its reply left as JSON (cast_to=object): its typed models
            # are built float by float, 170 ms of CPU for 64 vectors of 256 dimensions.
            reply = await client.post("/embeddings", cast_to=object, body=body)
        except openai.APIStatusError as exc:
            from rousseau.providers.errors import error_message, status_error

            raise status_error(
                SECTION,
                exc.status_code,
                error_message(exc.body, exc.message),
                model=self.model,
                key_hint="check embeddings.api_key",
                section=SECTION,
            ) from exc
        except openai.APIConnectionError as exc:
            from rousseau.providers.errors import connection_error

            timeout = isinstance(exc, openai.APITimeoutError)
            error = connection_error(SECTION, self.base_url, section=SECTION, timeout=timeout)
            raise error from exc
        try:
            data = sorted(reply["data"], key=lambda d: d["index"])
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (TypeError, KeyError, ValueError) as exc:
            raise ProviderError(SECTION, f"not an embeddings reply: {exc!r}"[:300]) from exc
        if len(vectors) != len(texts):
            raise ProviderError(SECTION, f"{len(texts)} texts sent, {len(vectors)} vectors back")
        return vectors

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
