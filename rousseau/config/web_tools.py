"""The web tools' section: what web_fetch may reach and take in, where web_search asks, and
which Chromium the browser tool drives."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import ByteSize, Field, SecretStr, ValidationInfo, field_validator

from rousseau.config.base import Duration, Section


class FetchConfig(Section):
    allow_private: bool = False
    """Let the tools reach loopback, private, link-local, CGNAT and cloud-metadata addresses
    (a home network's router, NAS and the like); off, they are refused with a reason."""
    allow_hosts: list[str] = Field(default_factory=list)
    """Host names (or addresses) reachable although they resolve to such an address."""
    max_bytes: ByteSize = ByteSize(5_000_000)
    """The most one body may weigh once decompressed (e.g. 5MB); past it, it is cut."""
    timeout: Duration = 20.0
    """The longest one web_fetch call may take, redirects included."""


class SearchConfig(Section):
    provider: Literal["searxng", "brave", "tavily"]
    """Where web_search asks: a SearXNG of your own (its JSON API), Brave Search or Tavily."""
    base_url: str | None = Field(default=None, validate_default=True)
    """The provider's address: SearXNG's, required (e.g. http://localhost:8888); Brave's and
    Tavily's own by default (https://api.search.brave.com, https://api.tavily.com). Yours to
    choose, so a local SearXNG needs no allow_private."""
    api_key: SecretStr | None = None
    """Brave's subscription token or Tavily's key (or BRAVE_API_KEY, TAVILY_API_KEY)."""
    timeout: Duration = 15.0
    """The longest one search may take."""

    @field_validator("base_url")
    @classmethod
    def _address(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not value.strip():
            if info.data.get("provider") == "searxng":
                raise ValueError(
                    "SearXNG has no address of its own; set yours (e.g. http://localhost:8888)"
                )
            return None
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// address")
        return value


class BrowserConfig(Section):
    executable: str = "/usr/bin/chromium"
    """The Chromium the browser tool drives (Debian's package by default)."""
    idle_close: Duration = 300.0
    """A browser unused this long is closed (it starts again on the next call)."""
    max_tabs: int = Field(default=8, ge=1)
    """Tabs open at once in one agent's browser (one per chat); the oldest is closed."""
    enabled: bool = True
    """Offer the browser tool when Playwright and this Chromium are installed."""


class WebToolsConfig(Section):
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    """web_fetch, and the address rules all three tools keep."""
    search: SearchConfig | None = None
    """web_search; unset, the tool is not offered."""
    browser: BrowserConfig = Field(default_factory=BrowserConfig)
    """The browser tool."""
