"""The web tools' costs along the whole path a call takes (HTTP through httpcore with the
address check, decompression, main-content extraction, the parts and the fence), against a
server on 127.0.0.1 in this process:

- web_fetch of a 1 MB page, gzip-compressed on the wire as servers send it: a 100 kB article
  inside scripts, menus and footers as pages are, and a worst case made of nothing but
  article markup. The time of one call, median of 15 after one warm-up, and the peak memory
  one call adds, measured in a child process so only the tool's memory counts (targets:
  < 300 ms, < 50 MB).
- browser: the time to start Chromium (Playwright's driver, the checking proxy, Chromium
  with a fresh profile, its first tab), to open a page whose text a script fetches, and to
  read it (snapshot), on that small page and on one of 400 links and paragraphs. Medians over
  5 cold starts, each in a fresh state folder (targets: start < 2 s, snapshot < 500 ms).

Run: python bench/web.py
"""

from __future__ import annotations

import gzip
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 15
SIZE = 1_000_000
BROWSER_RUNS = 5


def _section(n: int, *, dense: bool) -> str:
    paragraphs = "".join(
        f"<p>At meeting {n}.{j} the council discussed the budget for year {2000 + n + j}. "
        f"Members asked about the <a href='/roads/{n}/{j}'>road works on street {j}</a>, the "
        f"library hours in district {n} and the cost of heating {j} schools.</p>"
        for j in range(6)
    )
    extra = (
        f"<table><tr><th>Item</th><th>Cost</th></tr><tr><td>Roads {n}</td><td>{n}00</td></tr>"
        f"</table><ul><li>first point {n}</li><li>second point {n}</li></ul>"
    )
    return f"<h2>Part {n}</h2>{paragraphs}{extra if dense else ''}"


def page(*, dense: bool) -> bytes:
    """About SIZE bytes of HTML. Not dense: a menu and a footer of 5,000 links and a script
    around an article of about 100 kB; dense: all of it article markup (a table and a list
    in every section), the worst case for extraction."""
    sections: list[str] = []
    while sum(map(len, sections)) < (SIZE if dense else 100_000):
        sections.append(_section(len(sections) + 1, dense=dense))
    nav = "<nav>" + " ".join(f"<a href='/m{i}'>Menu item {i}</a>" for i in range(3000)) + "</nav>"
    foot = "<footer>" + " ".join(f"<a href='/f{i}'>Link {i}</a>" for i in range(2000))
    foot += "</footer>"
    head = "<title>Minutes</title>"
    used = sum(map(len, sections)) + len(nav) + len(foot)
    if not dense and used < SIZE:
        line = "var state = {a: 1, b: [1, 2, 3], c: 'a value of some length'};\n"
        head += f"<script>{line * ((SIZE - used) // len(line))}</script>"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{head}</head><body>{nav}<main>"
        f"<article><h1>Minutes</h1>{''.join(sections)}</article></main>{foot}</body></html>"
    ).encode()


def serve(body: bytes) -> tuple[Any, str]:
    from aiohttp import web

    from tests.fakes.aio import AioServer

    compressed = gzip.compress(body)

    class Site(AioServer):
        def routes(self, app: web.Application) -> None:
            async def article(request: web.Request) -> web.Response:
                headers = {"Content-Encoding": "gzip", "Content-Type": "text/html"}
                return web.Response(body=compressed, headers=headers)

            app.router.add_get("/article", article)

    site = Site().start()
    return site, f"{site.url}/article"


CHILD = """
import resource, sys, anyio, brotli, httpcore, pypdf, trafilatura
from rousseau.agent.protocols import ToolCall
from rousseau.tools.web.fetch import WebFetchTool
from rousseau.tools.web.guard import AddressRules

async def main() -> None:
    tool = WebFetchTool(AddressRules.of(False, ["127.0.0.1"]), max_bytes=5_000_000, timeout=60)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = await tool.execute({"url": sys.argv[1]}, ToolCall(session_id="s", tool_use_id="t"))
    assert not out.is_error, out.content
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)

anyio.run(main)
"""


def fetch_figures(*, dense: bool) -> list[str]:
    import anyio

    from rousseau.agent.protocols import ToolCall
    from rousseau.tools.web.fetch import WebFetchTool
    from rousseau.tools.web.guard import AddressRules

    body = page(dense=dense)
    site, url = serve(body)
    took: list[float] = []
    chars = 0
    try:
        tool = WebFetchTool(AddressRules.of(False, ["127.0.0.1"]), max_bytes=5_000_000, timeout=60)
        call = ToolCall(session_id="bench", tool_use_id="t")

        async def runs() -> None:
            nonlocal chars
            for _ in range(RUNS + 1):
                started = time.perf_counter()
                out = await tool.execute({"url": url, "max_chars": 200_000}, call)
                took.append(time.perf_counter() - started)
                assert not out.is_error, out.content
                chars = len(out.content)
            await tool.aclose()

        anyio.run(runs)
        grown = subprocess.run(
            [sys.executable, "-c", CHILD, url], capture_output=True, text=True, check=True
        ).stdout.strip()
    finally:
        site.stop()
    took = took[1:]  # the first call imports the libraries
    kind = "all of it article markup (worst case)" if dense else "a 100 kB article in it"
    return [
        f"web_fetch, a 1 MB page ({len(body):,} bytes of HTML, gzip on the wire), {kind}",
        f"  fetch and convert, median of {RUNS}: {statistics.median(took) * 1000:.0f} ms "
        f"(min {min(took) * 1000:.0f}, max {max(took) * 1000:.0f}); target < 300 ms",
        f"  peak memory one call adds: {float(grown):.1f} MB; target < 50 MB",
        f"  first part returned: {chars:,} characters",
    ]


SMALL = (
    "<title>Weather</title><h1>Weather</h1><p id=late>loading</p><a href=/more>more</a>"
    "<script>fetch('/forecast.json').then(r => r.json())"
    ".then(d => { document.getElementById('late').textContent = d.forecast })</script>"
)
LARGE = "<title>Index</title><h1>Index</h1>" + "".join(
    f"<p>Paragraph {i} of the index, with a few words to read.</p><a href=/p/{i}>page {i}</a>"
    for i in range(400)
)
BROWSER_PAGES = {"/": SMALL, "/large": LARGE, "/forecast.json": '{"forecast": "sunny"}'}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = BROWSER_PAGES.get(self.path, "<title>404</title>").encode()
        self.send_response(200)
        kind = "application/json" if self.path.endswith(".json") else "text/html"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def browser_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def browser_times(runs: int = BROWSER_RUNS) -> dict[str, float]:
    """Median seconds of: start, open (small page), snapshot (small), snapshot (large)."""
    import anyio

    from rousseau.agent import ToolCall
    from rousseau.assembly import tool_files
    from rousseau.tools.web import web_tools
    from tests.helpers import config_in

    executable = shutil.which("chromium") or "/usr/bin/chromium"
    call = ToolCall(session_id="bench", tool_use_id="t")
    figures: dict[str, list[float]] = {
        "start": [],
        "open": [],
        "snapshot": [],
        "snapshot (400 links)": [],
    }

    async def one(base: str, folder: Path) -> None:
        config = config_in(
            folder,
            ROUSSEAU_WEB_TOOLS_BROWSER_EXECUTABLE=executable,
            ROUSSEAU_WEB_TOOLS_FETCH_ALLOW_HOSTS="127.0.0.1",
        )
        [tool] = [t for t in web_tools(config, files=tool_files(config)) if t.name == "browser"]
        try:
            began = time.perf_counter()
            await tool.chromium.tab("bench")
            figures["start"].append(time.perf_counter() - began)
            for action, url, key in (
                ("open", f"{base}/", "open"),
                ("snapshot", None, "snapshot"),
                ("open", f"{base}/large", None),
                ("snapshot", None, "snapshot (400 links)"),
            ):
                began = time.perf_counter()
                out = await tool.execute(
                    {"action": action, "url": url} if url else {"action": action}, call
                )
                took = time.perf_counter() - began
                if out.is_error:
                    raise SystemExit(f"{action} failed: {out.content}")
                if key is not None:
                    figures[key].append(took)
        finally:
            await tool.aclose()

    with browser_site() as base:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as folder:
                anyio.run(one, base, Path(folder))
    return {name: statistics.median(values) for name, values in figures.items()}


def browser_figures() -> list[str]:
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        return ["browser: no Chromium here (Debian's chromium package)"]
    lines = [f"browser, pages on 127.0.0.1, median of {BROWSER_RUNS} cold starts"]
    for name, seconds in browser_times().items():
        lines.append(f"  {name:<22} {seconds * 1000:6.0f} ms")
    lines.append("  targets: start < 2000 ms, snapshot < 500 ms")
    return lines


def main() -> None:
    for dense in (False, True):
        for line in fetch_figures(dense=dense):
            print(line, flush=True)
    for line in browser_figures():
        print(line, flush=True)


if __name__ == "__main__":
    main()
