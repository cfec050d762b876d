"""The model backends' sections: one per provider, as `anthropic:`, `openai:` and the rest."""

from __future__ import annotations

from pydantic import Field, SecretStr

from rousseau.config.base import Duration, Section


class AnthropicConfig(Section):
    api_key: SecretStr | None = None
    """The Anthropic API key (or ANTHROPIC_API_KEY)."""
    model: str = "claude-sonnet-4-5"
    """The model that answers."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An API address to use instead of Anthropic's own (a proxy or gateway)."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class OpenAIConfig(Section):
    api_key: SecretStr | None = None
    """The API key (or OPENAI_API_KEY, or OPENROUTER_API_KEY for openrouter; Ollama needs none)."""
    model: str = "gpt-4.1-mini"
    """The model that answers."""
    base_url: str | None = None
    """An OpenAI-compatible chat-completions server to use instead of OpenAI's own."""
    max_tokens: int = Field(default=4096, ge=1)
    """The most tokens one reply may use."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class OpenRouterConfig(OpenAIConfig):
    model: str = "anthropic/claude-sonnet-4.5"
    """The model that answers, as OpenRouter names it."""
    base_url: str | None = "https://openrouter.ai/api/v1"
    """The OpenRouter API address."""


class OllamaConfig(OpenAIConfig):
    model: str = "llama3.2"
    """The model that answers, as Ollama names it."""
    base_url: str | None = "http://localhost:11434/v1"
    """The address of Ollama's OpenAI-compatible API."""


class BedrockConfig(Section):
    region: str | None = None
    """The AWS region (or AWS_REGION)."""
    model: str = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    """The Bedrock model id that answers."""
    profile: str | None = None
    """An AWS profile name to take credentials from (or AWS_PROFILE)."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An endpoint to use instead of the region's bedrock-runtime address."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class VertexConfig(Section):
    project: str | None = None
    """The Google Cloud project; unset, the project the credentials name."""
    region: str | None = None
    """The Vertex AI region, e.g. us-east5, or global."""
    model: str = "claude-sonnet-4-5@20250929"
    """The Vertex AI model id that answers."""
    credentials_file: str | None = None
    """A Google credentials file (or GOOGLE_APPLICATION_CREDENTIALS, or gcloud's ADC)."""
    max_tokens: int = Field(default=8192, ge=1)
    """The most tokens one reply may use."""
    base_url: str | None = None
    """An endpoint to use instead of the region's aiplatform.googleapis.com address."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a request that failed with 429, a 5xx or a connection error, with backoff."""
    timeout: Duration = 600.0
    """The longest one request may take."""
    prompt_caching: bool = True
    """Set cache breakpoints on the stable prefix of each request."""
    vision: bool = True
    """The model takes images (and, on the Messages API, PDFs); false shows them to it as
    a one-line text stand-in instead."""


class ClaudeCLIConfig(Section):
    binary: str = "claude"
    """The Claude Code CLI to run, as a command name or path."""
    model: str = ""
    """The model passed as --model; empty leaves the choice to the CLI."""
    permission_mode: str = "default"
    """The CLI's --permission-mode; empty passes none."""
    extra_args: list[str] = Field(default_factory=list)
    """Further arguments added to every CLI invocation."""
