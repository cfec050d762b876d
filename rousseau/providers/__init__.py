"""Model providers, one module per vendor, imported only when chosen."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rousseau.agent import ConfigError

if TYPE_CHECKING:
    from rousseau.agent import Provider
    from rousseau.config import Config

__all__ = ["build_provider", "detect_provider"]

_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}


def detect_provider(config: Config) -> tuple[str, str]:
    """Which provider to use and why: the configured one, else the first usable.

    This may probe localhost for Ollama, so call it off the event loop.
    """
    if config.provider:
        return config.provider, "set by provider in the configuration"
    if config.anthropic.api_key is not None:
        return "anthropic", "an Anthropic API key is set"
    if config.openai.api_key is not None:
        return "openai", "an OpenAI API key is set"
    if _reachable(config.ollama.base_url or "http://localhost:11434"):
        return "ollama", f"Ollama answers at {config.ollama.base_url}"
    raise ConfigError(
        "no model provider configured: set ANTHROPIC_API_KEY or OPENAI_API_KEY, "
        "or set provider (and its section) in the config file"
    )


def build_provider(config: Config, name: str | None = None) -> Provider:
    """Construct the named provider (default: the detected one) from its config section."""
    chosen = name or detect_provider(config)[0]
    if chosen == "anthropic":
        from rousseau.providers.anthropic import AnthropicProvider

        a = config.anthropic
        return AnthropicProvider(
            api_key=_key(chosen, a.api_key),
            model=a.model,
            max_tokens=a.max_tokens,
            base_url=a.base_url,
            max_retries=a.max_retries,
            timeout=a.timeout,
        )
    if chosen in ("openai", "openrouter", "ollama"):
        from rousseau.providers.openai import OpenAIProvider

        o = getattr(config, chosen)
        key = "ollama" if chosen == "ollama" and o.api_key is None else _key(chosen, o.api_key)
        return OpenAIProvider(
            name=chosen,
            api_key=key,
            model=o.model,
            base_url=o.base_url,
            max_tokens=o.max_tokens,
            max_retries=o.max_retries,
            timeout=o.timeout,
        )
    raise ConfigError(f"provider: {chosen!r} is not available in this version")


def _key(name: str, secret: object) -> str:
    value = getattr(secret, "get_secret_value", lambda: "")()
    if not value:
        env = _KEY_ENV.get(name, "")
        raise ConfigError(
            f"{name}.api_key: not set; set {env} or {name}.api_key in the config file"
        )
    return str(value)


def _reachable(url: str, timeout: float = 0.3) -> bool:
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
