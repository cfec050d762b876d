"""The tools that read the web: web_fetch, web_search and browser. What web_fetch and the
browser reach is held to the address rules of `guard` (http(s) only; this machine's networks
refused unless allowed); web_search asks only the backend the owner configured."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from rousseau.messages import DEFAULT_AGENT
from rousseau.tools.web.guard import AddressRules, Refused

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.tools.base import Tool
    from rousseau.tools.web.chromium import Files

__all__ = ["AddressRules", "Refused", "web_tools"]

_FETCH_NEEDS = ("httpcore", "h2", "trafilatura", "pypdf", "brotli")
"""What web_fetch imports on its first call (the webtools extra)."""
_SEARCH_NEEDS = ("httpx",)
"""What web_search imports on its first call (the webtools extra)."""

_PLAYWRIGHT = (1, 65)
"""A Playwright whose snapshots' refs its locators resolve (Page.get_by_ref: 1.62 lacked it,
1.65 has it)."""

_log = structlog.get_logger("rousseau.tools")


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def web_tools(
    config: Config,
    agent: str = DEFAULT_AGENT,
    files: Files | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Tool]:
    """The web tools `config` and this installation allow agent `agent` (the browser where
    it has `files` to put screenshots and downloads in); nothing of the libraries they use
    is imported before their first call. `environ` (this process's by default) may hold the
    search provider's key."""
    web = config.web_tools
    rules = AddressRules.of(web.fetch.allow_private, web.fetch.allow_hosts)
    tools: list[Tool] = []
    if _installed(*_FETCH_NEEDS):
        from rousseau.tools.web.fetch import WebFetchTool

        fetch = web.fetch
        tools.append(WebFetchTool(rules, max_bytes=int(fetch.max_bytes), timeout=fetch.timeout))
    if web.search is not None:
        if _installed(*_SEARCH_NEEDS):
            from rousseau.tools.web.search import search_tool

            search = search_tool(web.search, os.environ if environ is None else environ)
            if search is not None:
                tools.append(search)
        else:
            _log.warning("web_search.not_installed", fix="pip install 'rousseau[webtools]'")
    if web.browser.enabled and files is not None and _browser_usable(web.browser.executable):
        from rousseau.tools.web.browser import BrowserTool

        tools.append(BrowserTool.of(config, files, agent))
    return tools


def _browser_usable(executable: str) -> bool:
    """Playwright (recent enough) and the Chromium it drives are installed; said when only
    one of them is (without Playwright, the browser extra was not asked for)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("playwright")
    except PackageNotFoundError:
        return False
    if tuple(int(p) for p in found.split(".")[:2] if p.isdigit()) < _PLAYWRIGHT:
        _log.warning(
            "browser.playwright_too_old", found=found, fix="pip install 'playwright>=1.65'"
        )
        return False
    if shutil.which(executable) is None:
        _log.warning(
            "browser.no_chromium",
            executable=executable,
            fix="install Chromium (Debian: apt install chromium) or set "
            "web_tools.browser.executable",
        )
        return False
    return True
