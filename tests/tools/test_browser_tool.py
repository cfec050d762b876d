"""The browser tool in a real Chromium (Debian's, driven by Playwright) against a site served
on 127.0.0.1: pages read after their scripts ran, a form sent by refs, a screenshot the model
sees, downloads in the inbox, the idle browser closed, and the address rules kept for every
request Chromium makes, a script's navigation included."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Agent, AllowAllApprover, Options, ToolCall, ToolOutput
from rousseau.agent.testing import ScriptedProvider, tool_reply
from rousseau.tools import Registry
from tests.helpers import config_in, unavailable

pytestmark = pytest.mark.anyio

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PNG = b"\x89PNG\r\n\x1a\n"

PAGES = {
    "/": "<title>Late</title><h1>Weather</h1><p id=late>loading</p><script>"
    "fetch('/forecast.json').then(r => r.json())"
    ".then(d => { document.getElementById('late').textContent = d.forecast })</script>",
    "/forecast.json": '{"forecast": "sunny spells over Lyon"}',
    "/form": "<title>Sign up</title><form method=post action=/sent>"
    "<label>Name <input name=name></label><label>City <input name=city></label>"
    "<label>Size <select name=size><option>small<option>large</select></label>"
    "<button>Send</button></form>",
    "/jump": "<title>Jump</title><p>going</p><script>location.href = '{secret}'</script>",
    "/secret": "<title>Secret</title>the router's admin page",
    "/files": "<title>Files</title><a href=/report.csv>the report</a>",
}


@dataclass
class Site:
    """A small web site on 127.0.0.1, and what it was asked."""

    port: int = 0
    asked: list[str] = field(default_factory=list)
    posted: list[str] = field(default_factory=list)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.asked.append(self.path)
            if self.path == "/report.csv":
                self._send(b"year,rain\n2024,612\n", "text/csv", attachment="report.csv")
                return
            page = PAGES.get(self.path)
            if page is None:
                self.send_error(404)
                return
            secret = site.url("/secret")
            kind = "application/json" if self.path.endswith(".json") else "text/html"
            self._send(page.replace("{secret}", secret).encode(), kind)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            site.posted.append(self.rfile.read(length).decode())
            self._send(b"<title>Thanks</title><p>Thank you, we got it.</p>", "text/html")

        def _send(self, body: bytes, kind: str, attachment: str = "") -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if attachment:
                self.send_header("Content-Disposition", f'attachment; filename="{attachment}"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def site() -> Iterator[Site]:
    site = Site()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.port = server.server_port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()
    thread.join()


def needs_chromium() -> None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install 'rousseau[browser]')")
    if not Path(CHROMIUM).exists():
        unavailable("Chromium is not installed (Debian's chromium package)")


def browser_tool(tmp_path: Path, **env: str) -> Any:
    """The browser tool as web_tools offers it, for a config whose state is in `tmp_path`."""
    from rousseau.assembly import tool_files
    from rousseau.tools.web import web_tools

    needs_chromium()
    config = config_in(tmp_path, ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=CHROMIUM, **env)
    [tool] = [t for t in web_tools(config, files=tool_files(config)) if t.name == "browser"]
    return tool


@pytest.fixture
async def tool(tmp_path: Path) -> Any:
    """The browser tool, allowed to reach 127.0.0.1 (where the site is)."""
    browser = browser_tool(tmp_path, ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS='["127.0.0.1"]')
    yield browser
    await browser.aclose()


async def call(tool: Any, session: str = "chat-1", **input: Any) -> ToolOutput:
    problem = tool.validate(input)
    assert problem is None, problem
    output: ToolOutput = await tool.execute(input, ToolCall(session_id=session, tool_use_id="t"))
    return output


def ref_of(text: str, role: str, name: str) -> str:
    found = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', text)
    assert found is not None, f"no {role} {name!r} with a ref in:\n{text}"
    return found.group(1)


def chromium_processes(profile: Path) -> list[int]:
    """The processes of the Chromium that uses `profile`."""
    wanted = f"--user-data-dir={profile}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(arg == wanted for arg in cmdline.split(b"\0")):
            found.append(int(entry.name))
    return found


async def test_a_page_made_by_javascript_is_read_by_snapshot(tool: Any, site: Site) -> None:
    opened = await call(tool, action="open", url=site.url("/"))
    assert not opened.is_error, opened.content
    assert "# Late" in opened.content and site.url("/") in opened.content
    assert opened.content.startswith("<web_content")  # fenced as untrusted
    assert "sunny spells over Lyon" in (await call(tool, action="snapshot")).content
    assert "/forecast.json" in site.asked  # fetched by the page's script, through the proxy


async def test_a_form_is_filled_and_sent_by_its_refs(tool: Any, site: Site) -> None:
    form = await call(tool, action="open", url=site.url("/form"))
    name, city = ref_of(form.content, "textbox", "Name"), ref_of(form.content, "textbox", "City")
    size, send = ref_of(form.content, "combobox", "Size"), ref_of(form.content, "button", "Send")
    assert not (await call(tool, action="type", ref=name, text="Ada Lovelace")).is_error
    assert not (await call(tool, action="type", ref=f"[ref={city}]", text="Lyon")).is_error
    assert "chose large" in (await call(tool, action="type", ref=size, text="large")).content
    sent = await call(tool, action="click", ref=send)
    assert not sent.is_error and "Thank you, we got it." in sent.content
    assert site.posted == ["name=Ada+Lovelace&city=Lyon&size=large"]


async def test_a_ref_not_on_the_last_snapshot_is_a_clear_error(tool: Any, site: Site) -> None:
    form = await call(tool, action="open", url=site.url("/form"))
    name = ref_of(form.content, "textbox", "Name")
    await call(tool, action="click", ref=ref_of(form.content, "button", "Send"))  # a new page
    stale = await call(tool, action="type", ref=name, text="x")
    assert stale.is_error and "last snapshot" in stale.content
    nothing = await call(tool, session="chat-2", action="snapshot")
    assert nothing.is_error and "open a URL first" in nothing.content


async def test_a_screenshot_reaches_the_model_as_a_png(tool: Any, site: Site) -> None:
    blobs = tool.chromium.files.blobs
    provider = ScriptedProvider(
        tool_reply("browser", action="open", url=site.url("/form")),
        tool_reply("browser", action="screenshot"),
        "A sign-up form.",
    )
    agent = Agent(provider, Registry([tool]), Options(approver=AllowAllApprover(), media=blobs))
    from rousseau.agent import Message, Session

    await agent.turn(Session(id="chat-1", messages=[Message.user("what is on that page?")]))
    sent = provider.requests[2]
    results = sent.messages[-1]
    [picture] = results.attachments
    assert [c.kind.value for c in results.content] == ["tool_result", "image"]
    assert picture.media_type == "image/png" and sent.media[picture.sha256].startswith(PNG)


async def test_a_download_is_saved_in_the_workspace_inbox(
    tool: Any, site: Site, tmp_path: Path
) -> None:
    files = await call(tool, action="open", url=site.url("/files"))
    got = await call(tool, action="click", ref=ref_of(files.content, "link", "the report"))
    saved = f"inbox/{date.today().isoformat()}/report.csv"
    assert saved in got.content, got.content
    assert (tmp_path / "ws" / saved).read_text() == "year,rain\n2024,612\n"


async def test_the_least_recently_used_tab_is_closed_past_max_tabs(
    tmp_path: Path, site: Site
) -> None:
    tool = browser_tool(
        tmp_path,
        ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS='["127.0.0.1"]',
        ROUSSEAU_WEB_TOOLS_BROWSER_MAX_TABS="2",
    )
    try:
        for chat in ("a", "b", "a", "c"):  # b is the least recently used when c opens
            assert not (await call(tool, chat, action="open", url=site.url("/form"))).is_error
        assert (await call(tool, "b", action="snapshot")).is_error
        for chat in ("a", "c"):
            assert "# Sign up" in (await call(tool, chat, action="snapshot")).content
    finally:
        await tool.aclose()


async def test_an_idle_browser_is_closed_and_starts_again(tmp_path: Path, site: Site) -> None:
    tool = browser_tool(
        tmp_path,
        ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS='["127.0.0.1"]',
        ROUSSEAU_WEB_TOOLS_BROWSER_IDLE_CLOSE="0.5",
    )
    profile = tool.chromium.folder / "profile"
    try:
        assert not (await call(tool, action="open", url=site.url("/form"))).is_error
        assert chromium_processes(profile)
        with anyio.fail_after(30):
            while tool.chromium.running or chromium_processes(profile):
                await anyio.sleep(0.1)
        again = await call(tool, action="open", url=site.url("/form"))
        assert "# Sign up" in again.content and chromium_processes(profile)
    finally:
        await tool.aclose()
    assert chromium_processes(profile) == []


async def test_a_chromium_that_died_is_started_again_at_the_next_call(
    tool: Any, site: Site
) -> None:
    profile = tool.chromium.folder / "profile"
    assert not (await call(tool, action="open", url=site.url("/form"))).is_error
    for pid in chromium_processes(profile):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with anyio.fail_after(30):
        while tool.chromium.running:  # Playwright saw it go
            await anyio.sleep(0.05)
    assert (await call(tool, action="snapshot")).is_error  # its page went with it
    again = await call(tool, action="open", url=site.url("/form"))
    assert "# Sign up" in again.content and chromium_processes(profile)


async def test_closing_an_agents_tools_at_shutdown_closes_its_chromium(
    tmp_path: Path, site: Site
) -> None:
    from rousseau.assembly import build_registry, close_tools

    needs_chromium()
    config = config_in(
        tmp_path,
        ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=CHROMIUM,
        ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS="127.0.0.1",
    )
    registry = build_registry(config, "helper")
    tool = registry.get("browser")
    profile = tmp_path / "browser" / "helper" / "profile"  # beside the state, per agent
    assert not (await call(tool, action="open", url=site.url("/form"))).is_error
    assert chromium_processes(profile)
    await close_tools([registry, registry])  # a tool in several registries is closed once
    assert chromium_processes(profile) == []


async def test_a_loopback_page_is_refused_under_the_default_rules(
    tmp_path: Path, site: Site
) -> None:
    tool = browser_tool(tmp_path)
    try:
        for url in (site.url("/secret"), site.url("/secret").replace("http:", "https:")):
            refused = await call(tool, action="open", url=url)
            assert refused.is_error and refused.content.startswith("refused: 127.0.0.1")
            assert "a loopback address" in refused.content
    finally:
        await tool.aclose()
    assert site.asked == []


async def test_a_script_sending_an_allowed_page_to_a_refused_host_is_refused(
    tmp_path: Path, site: Site
) -> None:
    tool = browser_tool(tmp_path, ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS='["localhost"]')
    try:
        refused = await call(tool, action="open", url=site.url("/jump", host="localhost"))
    finally:
        await tool.aclose()
    assert refused.is_error and refused.content.startswith("refused: 127.0.0.1")
    assert "a loopback address" in refused.content and site.url("/secret") in refused.content
    assert site.asked == ["/jump"]  # the secret page was never asked for


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "chrome://settings",
        "about:config",
        "data:text/html,<b>hi</b>",
        "javascript:alert(1)",
        "view-source:http://example.org/",
    ],
)
async def test_other_schemes_are_refused_before_any_browser_starts(
    tmp_path: Path, url: str
) -> None:
    tool = browser_tool(tmp_path, ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_PRIVATE="true")
    refused = await call(tool, action="open", url=url)
    assert refused.is_error and refused.content.startswith("refused: only http and https")
    assert not tool.chromium.running


def test_the_browser_is_offered_only_when_enabled_and_chromium_is_there(tmp_path: Path) -> None:
    from rousseau.assembly import tool_files
    from rousseau.tools.web import web_tools

    needs_chromium()

    def names(**env: str) -> set[str]:
        config = config_in(tmp_path, **env)
        return {t.name for t in web_tools(config, files=tool_files(config))}

    assert "browser" in names(ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=CHROMIUM)
    assert "browser" not in names(
        ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=CHROMIUM, ROUSSEAU_WEB_TOOLS_BROWSER_ENABLED="0"
    )
    missing = str(tmp_path / "no-chromium")
    assert "browser" not in names(ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=missing)
