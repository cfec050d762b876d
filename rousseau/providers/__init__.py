"""Model providers, one module per vendor, each imported only when chosen."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any
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
    """Which provider to use and why: the configured one, else the first usable of anthropic
    (key set), openai (key set), claudecli (binary on PATH), ollama (answering on localhost).

    This may probe localhost for Ollama, so call it off the event loop.
    """
    if config.provider:
        return config.provider, "set by provider in the configuration"
    if config.anthropic.api_key is not None:
        return "anthropic", "an Anthropic API key is set"
    if config.openai.api_key is not None:
        return "openai", "an OpenAI API key is set"
    binary = shutil.which(config.claudecli.binary)
    if binary:
        return "claudecli", f"the Claude CLI is on PATH ({binary})"
    ollama = config.ollama.base_url or "http://localhost:11434/v1"
    if _reachable(ollama):
        return "ollama", f"Ollama answers at {ollama}"
    raise ConfigError(
        "no model provider configured: run `rousseau init` to set one up, or set "
        "ANTHROPIC_API_KEY or OPENAI_API_KEY, or provider (and its section) in the config file"
    )


def build_provider(config: Config, name: str | None = None, *, store: Any = None) -> Provider:
    """The chosen provider, wrapped with the `fallback` list when one is configured.

    `store` keeps state some providers need across restarts (claudecli's session ids).
    """
    chosen = name or detect_provider(config)[0]
    primary = _build_one(config, chosen, store)
    others = [p for p in config.fallback if p != chosen]
    if not others:
        return primary
    from rousseau.providers.fallback import FallbackProvider

    return FallbackProvider([primary, *(_build_one(config, p, store) for p in others)])


def _build_one(config: Config, name: str, store: Any) -> Provider:
    if name == "anthropic":
        from rousseau.providers.anthropic import AnthropicProvider

        a = config.anthropic
        return AnthropicProvider(
            api_key=_key(name, a.api_key),
            model=a.model,
            max_tokens=a.max_tokens,
            base_url=a.base_url,
            max_retries=a.max_retries,
            timeout=a.timeout,
            prompt_caching=a.prompt_caching,
            vision=a.vision,
        )
    if name in ("openai", "openrouter", "ollama"):
        from rousseau.providers.openai import OpenAIProvider

        o = getattr(config, name)
        key = "ollama" if name == "ollama" and o.api_key is None else _key(name, o.api_key)
        return OpenAIProvider(
            name=name,
            api_key=key,
            model=o.model,
            base_url=o.base_url,
            max_tokens=o.max_tokens,
            max_retries=o.max_retries,
            timeout=o.timeout,
            vision=o.vision,
        )
    if name == "bedrock":
        from rousseau.providers.bedrock import BedrockProvider

        b = config.bedrock
        return BedrockProvider(
            model=b.model,
            region=b.region,
            profile=b.profile,
            max_tokens=b.max_tokens,
            base_url=b.base_url,
            max_retries=b.max_retries,
            timeout=b.timeout,
            prompt_caching=b.prompt_caching,
            vision=b.vision,
        )
    if name == "vertex":
        from rousseau.providers.vertex import VertexProvider

        v = config.vertex
        return VertexProvider(
            model=v.model,
            project=v.project,
            region=v.region,
            credentials_file=v.credentials_file,
            max_tokens=v.max_tokens,
            base_url=v.base_url,
            max_retries=v.max_retries,
            timeout=v.timeout,
            prompt_caching=v.prompt_caching,
            vision=v.vision,
        )
    if name == "claudecli":
        from rousseau.providers.claudecli import ClaudeCLIProvider
        from rousseau.tools import scrubbed_environ

        c = config.claudecli
        return ClaudeCLIProvider(
            binary=c.binary,
            model=c.model,
            permission_mode=c.permission_mode,
            extra_args=c.extra_args,
            workspace=Path(config.agent.workspace).expanduser(),
            env=scrubbed_environ(secrets=config.secrets()),
            sessions=store,
        )
    return _plugin(config, name)


def _key(name: str, secret: object) -> str:
    value = getattr(secret, "get_secret_value", lambda: "")()
    if not value:
        raise ConfigError(
            f"{name}.api_key: not set; set {_KEY_ENV.get(name, 'it')} or {name}.api_key"
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


def _plugin(config: Config, name: str) -> Provider:
    """The provider plugin `name` built from its section; a ConfigError when it did not load."""
    configured = config.plugins.get(name)
    if configured is None:
        raise ConfigError(f"provider: unknown provider {name!r}")
    if configured.plugin is None:
        raise ConfigError(f"{name}: the provider plugin did not load: {configured.error}")
    build: Any = configured.plugin.build
    return build(configured.section)  # type: ignore[no-any-return]
