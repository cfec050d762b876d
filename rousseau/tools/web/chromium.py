"""One agent's Chromium, driven by Playwright: started on its first use, closed once unused
for `idle_close` seconds (or by `aclose`), with a tab per session, the least recently used
closed past `max_tabs`, and a profile of its own (cookies, storage) in the state's folder.

Every request it makes goes through its CheckingProxy; which of a tab's requests were
refused, and why, is kept on the tab for the tool to report. Files it downloads are moved to
the workspace's inbox/ as inbound files are.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import anyio
import structlog

from rousseau.agent import Attachment
from rousseau.private import private_folder
from rousseau.tools.web.guard import AddressRules
from rousseau.tools.web.proxy import CheckingProxy

if TYPE_CHECKING:
    from playwright.async_api import (
        BrowserContext,
        Download,
        Page,
        Playwright,
        Request,
        Response,
    )

log = structlog.get_logger("rousseau.tools.web")

VIEWPORT = {"width": 1280, "height": 800}
ACTION_TIMEOUT = 15.0
"""Seconds a click, a fill or a key press may wait for its element."""
NAVIGATION_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0
ARGS = (
    "--disable-quic",  # QUIC is UDP: it would not go through the proxy
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",  # nor would WebRTC's UDP
    "--proxy-bypass-list=<-loopback>",  # Chromium would reach localhost around the proxy
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--disable-gpu",
)
_warned_root = False


class Files(Protocol):
    """Where the browser puts what it gives: a screenshot in the blob store (for the model to
    see), a download in the workspace's inbox/ as inbound files are (the assembly's)."""

    async def keep(self, data: bytes, *, media_type: str, name: str) -> Attachment:
        """The bytes stored, as an attachment of a message."""
        ...

    async def to_inbox(self, name: str, source: Path) -> str:
        """A copy of the file at `source` in the workspace's inbox/, named after `name`;
        its path in the workspace."""
        ...


@dataclass(kw_only=True, slots=True)
class Tab:
    """One session's page, and what happened on it since the tool last looked."""

    page: Page
    refs: frozenset[str] = frozenset()
    """The refs of the page's last snapshot: what click and type may name."""
    refused: tuple[str, str] | None = None
    """(URL, why) of the last top-level navigation, when the address rules refused it."""
    blocked: dict[str, str] = field(default_factory=dict)
    """Other requests of the page that were refused: host -> why."""
    downloads: list[asyncio.Task[str]] = field(default_factory=list)
    """Downloads under way; each ends in a line saying where the file went."""
    notes: list[str] = field(default_factory=list)
    """What the model should hear with the next result (the page opened a new tab...)."""
    aborted: bool = False
    """A top-level navigation ended without a page: a download, most likely."""
    download_begun: anyio.Event = field(default_factory=anyio.Event)

    def take_news(self) -> None:
        """Forget what the last result already reported."""
        self.refused = None
        self.blocked.clear()
        self.notes.clear()
        self.aborted = False
        self.download_begun = anyio.Event()


class Chromium:
    """One agent's browser. `using()` around each call keeps it from closing meanwhile."""

    def __init__(
        self,
        *,
        rules: AddressRules,
        executable: str,
        folder: Path,
        files: Files,
        idle_close: float,
        max_tabs: int,
        max_download: int,
    ) -> None:
        self.rules = rules
        self.executable = executable
        self.folder = folder
        """Private: the profile (profile/) and downloads on their way (downloads/)."""
        self.files = files
        self.idle_close = idle_close
        self.max_tabs = max_tabs
        self.max_download = max_download
        self.tabs: OrderedDict[str, Tab] = OrderedDict()
        """By session, the least recently used first."""
        self.proxy: CheckingProxy | None = None
        self._playwright: Playwright | None = None
        self._context: BrowserContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch: asyncio.Task[None] | None = None
        self._scratch: Path | None = None
        """A throwaway profile, used while another Chromium holds the agent's own."""
        self._closing: set[asyncio.Future[None]] = set()
        """Pages a popup replaced, being closed."""
        self._gone = False
        """Chromium went away by itself; what is left of it is closed at the next call."""
        self._lock = anyio.Lock()
        self._busy = 0
        self._last = time.monotonic()

    @property
    def running(self) -> bool:
        return self._context is not None and not self._gone

    @asynccontextmanager
    async def using(self) -> AsyncIterator[None]:
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self._last = time.monotonic()

    def existing(self, session: str) -> Tab | None:
        """The session's tab, if it has one in a running browser."""
        if not self.running or asyncio.get_running_loop() is not self._loop:
            return None
        tab = self.tabs.get(session)
        if tab is not None and tab.page.is_closed():  # the page closed itself
            del self.tabs[session]
            return None
        if tab is not None:
            self.tabs.move_to_end(session)
        return tab

    async def tab(self, session: str) -> Tab:
        """The session's tab, the browser started and the tab opened as needed."""
        async with self._lock:
            if self._context is not None and asyncio.get_running_loop() is not self._loop:
                self._forget()  # its event loop is gone, and the driver with it
            if self._gone:
                await self._stop()
            if self._context is None:
                await self._start()
            assert self._context is not None
            tab = self.tabs.get(session)
            if tab is not None and tab.page.is_closed():
                del self.tabs[session]
                tab = None
            if tab is not None:
                self.tabs.move_to_end(session)
                return tab
            while len(self.tabs) >= self.max_tabs:
                _, oldest = self.tabs.popitem(last=False)
                await _close_page(oldest.page)
            owned = {id(t.page) for t in self.tabs.values()}
            spare = [p for p in self._context.pages if id(p) not in owned]
            page = spare[0] if spare else await self._context.new_page()
            tab = Tab(page=page)
            self._wire(tab, page)
            self.tabs[session] = tab
            return tab

    async def close_tab(self, session: str) -> bool:
        tab = self.tabs.pop(session, None)
        if tab is None:
            return False
        for task in tab.downloads:
            task.cancel()
        await _close_page(tab.page)
        return True

    async def aclose(self) -> None:
        """Close the browser (at shutdown); the next call would start it again."""
        async with self._lock:
            await self._stop()

    async def _start(self) -> None:
        from playwright.async_api import async_playwright

        profile = self.folder / "profile"
        await anyio.to_thread.run_sync(private_folder, profile)
        await anyio.to_thread.run_sync(private_folder, self.folder / "downloads")
        if _in_use(profile):
            self._scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.folder))
            log.warning("browser.profile_in_use", profile=str(profile), using=str(self._scratch))
            profile = self._scratch
        proxy = CheckingProxy(self.rules)
        await proxy.start()
        try:
            playwright = await async_playwright().start()
            try:
                context = await playwright.chromium.launch_persistent_context(
                    profile,
                    executable_path=self.executable,
                    headless=True,
                    chromium_sandbox=_sandboxed(),
                    args=[*ARGS, f"--proxy-server={proxy.url}"],
                    accept_downloads=True,
                    downloads_path=self.folder / "downloads",
                    viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]},
                    timeout=NAVIGATION_TIMEOUT * 1000,
                )
            except BaseException:
                await playwright.stop()
                raise
        except BaseException:
            await proxy.aclose()
            self._drop_scratch()
            raise
        context.set_default_timeout(ACTION_TIMEOUT * 1000)
        context.set_default_navigation_timeout(NAVIGATION_TIMEOUT * 1000)
        context.on("close", lambda _: self._closed(context))
        self.proxy, self._playwright, self._context = proxy, playwright, context
        self._loop = asyncio.get_running_loop()
        self._last = time.monotonic()
        self._watch = self._loop.create_task(self._close_when_idle())
        log.info("browser.started", executable=self.executable, proxy_port=proxy.port)

    async def _stop(self) -> None:
        context, playwright, proxy = self._context, self._playwright, self.proxy
        self._context, self._playwright, self.proxy = None, None, None
        watch, self._watch = self._watch, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
        for tab in self.tabs.values():
            for task in tab.downloads:
                task.cancel()
        self.tabs.clear()
        if context is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT), suppress(Exception):
                await context.close()
        if playwright is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT), suppress(Exception):
                await playwright.stop()
        if proxy is not None:
            await proxy.aclose()
        self._drop_scratch()
        self._gone = False
        if context is not None:
            log.info("browser.closed")

    def _forget(self) -> None:
        """Let go of a browser whose event loop has ended (nothing of it can be awaited)."""
        self._context = self._playwright = self.proxy = None
        self._watch, self._gone = None, False
        self.tabs.clear()
        self._drop_scratch()

    def _closed(self, context: BrowserContext) -> None:
        """Chromium went away (it crashed, or was killed): start anew next time."""
        if self._context is context and not self._gone:
            self._gone = True
            log.warning("browser.gone")

    def _drop_scratch(self) -> None:
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    async def _close_when_idle(self) -> None:
        while True:
            left = self._last + self.idle_close - time.monotonic()
            if left <= 0 and self._busy == 0:
                async with self._lock:
                    if self._busy == 0 and self._last + self.idle_close <= time.monotonic():
                        with anyio.CancelScope(shield=True):  # aclose may cancel this task
                            await self._stop()
                        return
            await anyio.sleep(left if left > 0 else min(self.idle_close, 1.0))

    def _wire(self, tab: Tab, page: Page) -> None:
        """Follow what the page does between calls: refused requests, downloads, popups."""
        page.on("response", functools.partial(self._answered, tab))
        page.on("requestfailed", functools.partial(self._failed, tab))
        page.on("download", functools.partial(self._download, tab))
        page.on("popup", functools.partial(self._popup, tab))

    def _answered(self, tab: Tab, response: Response) -> None:
        if response.status == 403:
            self._check(tab, response.request)
        elif _top_level(tab, response.request):
            tab.refused = None

    def _failed(self, tab: Tab, request: Request) -> None:
        self._check(tab, request)
        if tab.refused is None and _top_level(tab, request):
            tab.aborted = True

    def _download(self, tab: Tab, download: Download) -> None:
        tab.downloads.append(asyncio.ensure_future(self._save(download)))
        tab.download_begun.set()

    def _check(self, tab: Tab, request: Request) -> None:
        why = self._refusal(request.url)
        if why is None:
            return
        if _top_level(tab, request):
            tab.refused = (request.url, why)
        else:
            tab.blocked[urlsplit(request.url).hostname or request.url] = why

    def _refusal(self, url: str) -> str | None:
        if self.proxy is None:
            return None
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
        except ValueError:
            return None
        return self.proxy.refusal(parts.hostname or "", port) if parts.hostname else None

    def _popup(self, tab: Tab, popup: Page) -> None:
        """A page opened a new tab (a link with target=_blank, window.open): it becomes the
        session's page, and the one that opened it is closed (one tab per session)."""
        old, tab.page = tab.page, popup
        tab.refs = frozenset()
        self._wire(tab, popup)
        tab.notes.append("the page opened a new tab, which is now this chat's page")
        closing = asyncio.ensure_future(_close_page(old))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _save(self, download: Download) -> str:
        name = download.suggested_filename
        failure = await download.failure()
        if failure is not None:
            return f"the download of {name} failed ({failure})"
        path = await download.path()
        size = (await anyio.to_thread.run_sync(path.stat)).st_size
        if size > self.max_download:
            await download.delete()
            return (
                f"{name} was downloaded but not kept: {size:,} bytes, more than "
                f"{self.max_download:,} (web_tools.fetch.max_bytes)"
            )
        try:
            saved = await self.files.to_inbox(name, path)
        except OSError as exc:
            return f"{name} was downloaded but could not be saved in the workspace ({exc})"
        finally:
            await download.delete()
        return f"downloaded {name} ({size:,} bytes), saved in the workspace as {saved}"


def _top_level(tab: Tab, request: Request) -> bool:
    try:
        return request.is_navigation_request() and request.frame == tab.page.main_frame
    except Exception:  # a request of a frame already gone
        return False


async def _close_page(page: Page) -> None:
    with anyio.move_on_after(CLOSE_TIMEOUT), suppress(Exception):
        await page.close()


def _sandboxed() -> bool:
    """Chromium's own sandbox stays on, except for root, where Chromium refuses to start
    with it: then --no-sandbox, said once."""
    global _warned_root
    if os.geteuid() != 0:
        return True
    if not _warned_root:
        _warned_root = True
        log.warning(
            "browser.no_sandbox",
            reason="running as root: Chromium starts only without its sandbox; run the daemon "
            "as an ordinary user to keep it",
        )
    return False


def _in_use(profile: Path) -> bool:
    """Another Chromium on this machine holds the profile (`rousseau chat` beside the
    daemon, say): its lock names a live process."""
    try:
        owner = os.readlink(profile / "SingletonLock")
    except OSError:
        return False
    host, _, pid = owner.rpartition("-")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
