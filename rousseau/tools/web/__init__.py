"""The tools that read the web: web_fetch, web_search and browser, each under the address
rules of `guard` (http(s) only; this machine's networks refused unless allowed)."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from rousseau.tools.web.guard import AddressRules, Refused

if TYPE_CHECKING:
    from rousseau.config.web_tools import WebToolsConfig
    from rousseau.tools.base import Tool

__all__ = ["AddressRules", "Refused", "web_tools"]

FETCH_NEEDS = ("httpcore", "h2", "trafilatura", "pypdf", "brotli")
"""What web_fetch imports on its first call (the webtools extra)."""


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def web_tools(config: WebToolsConfig) -> list[Tool]:
    """The web tools `config` and this installation allow; nothing of the libraries they
    use is imported before their first call."""
    rules = AddressRules.of(config.fetch.allow_private, config.fetch.allow_hosts)
    tools: list[Tool] = []
    if installed(*FETCH_NEEDS):
        from rousseau.tools.web.fetch import WebFetchTool

        fetch = config.fetch
        tools.append(WebFetchTool(rules, max_bytes=int(fetch.max_bytes), timeout=fetch.timeout))
    return tools
