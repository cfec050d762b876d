"""The browser tool: one headless Chromium per agent, a tab per chat, pages read as text with
their interactive elements numbered, acted on by those numbers, and seen as screenshots.

Everything Chromium fetches passes the address rules of web_fetch (see `proxy`); what it
shows the model is fenced as untrusted web content.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from rousseau.agent.protocols import ToolCall, ToolOutput
from rousseau.messages import DEFAULT_AGENT
from rousseau.tools.base import Tool
from rousseau.tools.web.chromium import NAVIGATION_TIMEOUT, Chromium, Files, Tab
from rousseau.tools.web.fetch import untrusted
from rousseau.tools.web.guard import AddressRules, Refused
from rousseau.tools.web.pagetext import MAX_CHARS, page_text

if TYPE_CHECKING:
    from playwright.async_api import Locator

    from rousseau.config import Config

CALL_DEADLINE = 120.0
"""Seconds one call may take, downloads waited for included."""
DOWNLOAD_WAIT = 60.0
"""Seconds a call waits for downloads it started before answering without them."""
DOWNLOAD_START = 3.0
"""Seconds a navigation that ended without a page is given to turn out a download."""
ACTIONS = ("open", "snapshot", "click", "type", "press", "scroll", "back", "screenshot", "close")


class BrowserError(Exception):
    """A call that cannot be done as asked; the message says why, for the model."""


class BrowserTool(Tool):
    name = "browser"
    description = (
        "Use a web browser (headless Chromium, with its own cookies) for pages that need "
        "JavaScript, a login or a form. open a URL, or take a snapshot of the page: its title, "
        "URL and content as text, each link, button and field marked [ref=e12]. click or type "
        "into an element by its ref (refs hold until the next snapshot), press a key (Enter, "
        "Tab, Escape...), scroll, go back, take a screenshot to see the page, close the tab. "
        "Downloads are saved in the workspace's inbox/."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "url": {"type": "string", "description": "For open: the http(s) URL."},
            "ref": {"type": "string", "description": "For click and type: e.g. e12."},
            "text": {
                "type": "string",
                "description": "For type: what to enter (in a list: the option's label).",
            },
            "key": {"type": "string", "description": "For press: e.g. Enter, Tab, Control+a."},
            "direction": {
                "type": "string",
                "enum": ["down", "up"],
                "description": "For scroll: down (the default) or up, a screen at a time.",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, chromium: Chromium) -> None:
        self.chromium = chromium
        self._actions: dict[str, Callable[[dict[str, Any], str], Awaitable[ToolOutput]]] = {
            "open": self._open,
            "snapshot": self._snapshot,
            "click": self._click,
            "type": self._type,
            "press": self._press,
            "scroll": self._scroll,
            "back": self._back,
            "screenshot": self._screenshot,
            "close": self._close,
        }

    @classmethod
    def of(cls, config: Config, files: Files, agent: str = DEFAULT_AGENT) -> BrowserTool:
        """The browser of agent `agent`, its profile kept beside the state."""
        web = config.web_tools
        return cls(
            Chromium(
                rules=AddressRules.of(web.fetch.allow_private, web.fetch.allow_hosts),
                executable=shutil.which(web.browser.executable) or web.browser.executable,
                folder=Path(config.state.path).expanduser().parent / "browser" / agent,
                files=files,
                idle_close=web.browser.idle_close,
                max_tabs=web.browser.max_tabs,
                max_download=int(web.fetch.max_bytes),
            )
        )

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        from playwright.async_api import Error

        action = self._actions[input["action"]]
        async with self.chromium.using():
            with anyio.move_on_after(CALL_DEADLINE):
                try:
                    return await action(input, call.session_id)
                except BrowserError as exc:
                    return ToolOutput(content=str(exc), is_error=True)
                except Error as exc:
                    return ToolOutput(content=_said(exc), is_error=True)
        return ToolOutput(
            content=f"the browser gave up after {CALL_DEADLINE:g} s (the page may still be "
            "loading: take a snapshot)",
            is_error=True,
        )

    async def aclose(self) -> None:
        await self.chromium.aclose()

    async def _open(self, input: dict[str, Any], session: str) -> ToolOutput:
        from playwright.async_api import Error

        url = _needs(input, "url").strip()
        if url != "about:blank":
            try:
                self.chromium.rules.check_url(url)
            except Refused as exc:
                return ToolOutput(content=f"refused: {exc}", is_error=True)
        tab = await self.chromium.tab(session)
        tab.take_news()
        failure = None
        status = None
        try:
            response = await tab.page.goto(url)
            status = response.status if response is not None else None
        except Error as exc:
            failure = _said(exc)
        await _settle(tab)
        if tab.refused is None and failure is not None and not tab.downloads:
            return ToolOutput(content=f"could not open {url}: {failure}", is_error=True)
        notes = [f"the page answered HTTP {status}"] if status and status >= 400 else []
        return await self._page(tab, notes)

    async def _snapshot(self, input: dict[str, Any], session: str) -> ToolOutput:
        return await self._page(self._tab(session), [])

    async def _click(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        target = await _locate(tab, _needs(input, "ref"))
        tab.take_news()
        await target.click()
        await _settle(tab)
        return await self._page(tab, [])

    async def _type(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        ref = _needs(input, "ref")
        target = await _locate(tab, ref)
        text = str(input.get("text", ""))
        if await target.evaluate("e => e.tagName") == "SELECT":
            chosen = await target.select_option(text)
            said = f"chose {', '.join(chosen) or 'nothing'} in [ref={ref}]"
        else:
            await target.fill(text)
            said = f"typed {len(text):,} characters into [ref={ref}]"
        notes = await _news(tab)
        return ToolOutput(content=said + "".join(f"\n[{n}]" for n in notes))

    async def _press(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        tab.take_news()
        await tab.page.keyboard.press(_needs(input, "key"))
        await _settle(tab)
        return await self._page(tab, [])

    async def _scroll(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        up = input.get("direction") == "up"
        where = await tab.page.evaluate(
            "(up) => { window.scrollBy(0, (up ? -0.8 : 0.8) * window.innerHeight);"
            " return [Math.round(window.scrollY), window.innerHeight,"
            " document.documentElement.scrollHeight]; }",
            up,
        )
        top, seen, height = (int(n) for n in where)
        said = (
            f"scrolled {'up' if up else 'down'}: the window shows {top:,}-{top + seen:,} of the "
            f"page's {height:,} pixels (snapshot reads the whole page; screenshot shows this part)"
        )
        notes = await _news(tab)
        return ToolOutput(content=said + "".join(f"\n[{n}]" for n in notes))

    async def _back(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        tab.take_news()
        before = tab.page.url
        if await tab.page.go_back() is None and tab.page.url == before:
            raise BrowserError("there is no earlier page in this tab")
        await _settle(tab)
        return await self._page(tab, [])

    async def _screenshot(self, input: dict[str, Any], session: str) -> ToolOutput:
        tab = self._tab(session)
        png = await tab.page.screenshot(type="png")
        files = self.chromium.files
        picture = await files.keep(png, media_type="image/png", name="screenshot.png")
        notes = await _news(tab)
        said = f"a screenshot of {tab.page.url} ({len(png):,} bytes) follows"
        return ToolOutput(content=said + "".join(f"\n[{n}]" for n in notes), attachments=(picture,))

    async def _close(self, input: dict[str, Any], session: str) -> ToolOutput:
        closed = await self.chromium.close_tab(session)
        return ToolOutput(content="the tab is closed" if closed else "no tab was open")

    def _tab(self, session: str) -> Tab:
        tab = self.chromium.existing(session)
        if tab is None:
            raise BrowserError("no page is open in this chat: open a URL first")
        return tab

    async def _page(self, tab: Tab, notes: list[str]) -> ToolOutput:
        """The page as text (or why it was refused), with what happened meanwhile."""
        notes = notes + await _news(tab)
        if tab.refused is not None:
            (url, why), tab.refused = tab.refused, None
            tab.refs = frozenset()
            said = f"refused: {why}\n(the browser was sent to {url} and did not go)"
            return ToolOutput(content=said + "".join(f"\n[{n}]" for n in notes), is_error=True)
        page = tab.page
        snapshot = await page.aria_snapshot(mode="ai")
        shaped = page_text(snapshot)
        tab.refs = shaped.refs
        if shaped.cut:
            notes.append(
                f"the page's text was cut at {len(shaped.text):,} of {shaped.length:,} "
                f"characters (at most {MAX_CHARS:,} are shown)"
            )
        title = await page.title()
        text = f"# {title or '(untitled)'}\n\n{shaped.text}"
        return ToolOutput(content=untrusted(page.url, text, "".join(f"\n[{n}]" for n in notes)))


async def _settle(tab: Tab) -> None:
    """Wait for the page a navigation (or a click) led to to load, within reason."""
    from playwright.async_api import Error

    try:
        await tab.page.wait_for_load_state("load", timeout=NAVIGATION_TIMEOUT * 1000)
    except Error:
        pass  # still loading: what is there is read
    if tab.aborted and not tab.downloads:
        with anyio.move_on_after(DOWNLOAD_START):
            await tab.download_begun.wait()


async def _news(tab: Tab) -> list[str]:
    """What happened on the tab since the last result: downloads (waited for, a while),
    refused requests, a new tab."""
    notes = list(tab.notes)
    tab.notes.clear()
    if tab.downloads:
        with anyio.move_on_after(DOWNLOAD_WAIT):
            for task in list(tab.downloads):
                notes.append(await task)
                tab.downloads.remove(task)
        if tab.downloads:
            notes.append(f"{len(tab.downloads)} download(s) still under way")
    for host, why in list(tab.blocked.items())[:3]:
        notes.append(f"a request of the page to {host} was refused: {why}")
    if len(tab.blocked) > 3:
        notes.append(f"and requests to {len(tab.blocked) - 3} more hosts")
    tab.blocked.clear()
    return notes


async def _locate(tab: Tab, ref: str) -> Locator:
    ref = ref.strip().strip("[]").removeprefix("ref=")
    if ref not in tab.refs:
        raise BrowserError(
            f"[ref={ref}] is not on this page's last snapshot: take a snapshot and use its refs"
        )
    target = tab.page.get_by_ref(ref)
    if await target.count() == 0:
        raise BrowserError(
            f"[ref={ref}] is gone: the page changed since its last snapshot; take a new one"
        )
    return target


def _needs(input: dict[str, Any], key: str) -> str:
    value = input.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BrowserError(f"{input['action']} needs {key}")
    return value


def _said(exc: Exception) -> str:
    """Playwright's message without its call log."""
    return str(exc).split("\nCall log:", 1)[0].strip().removeprefix("Error: ") or repr(exc)
