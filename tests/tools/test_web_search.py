"""web_search against fake SearXNG, Brave Search and Tavily servers on 127.0.0.1 speaking
their APIs: what each is asked, how its answer is shown, and every failure as a tool error
the model reads (and after which the daemon answers on)."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response, ToolCall, ToolOutput
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import Config, ConfigError, load_config
from rousseau.config.web_tools import SearchConfig, WebToolsConfig
from rousseau.daemon import Daemon
from rousseau.policy import ChatPolicy
from rousseau.tools.web import web_tools
from rousseau.tools.web.search import WebSearchTool, _retry_after, search_tool
from rousseau.transports.base import MemoryTransport
from tests.fakes.search import FakeBrave, FakeSearch, FakeSearXNG, FakeTavily, Result
from tests.helpers import config_in, free_port

pytestmark = pytest.mark.anyio

KEY = "test-key-0123456789abcdef"


@pytest.fixture
def searxng() -> Iterator[FakeSearXNG]:
    server = FakeSearXNG().start()
    yield server
    server.stop()


@pytest.fixture
def brave() -> Iterator[FakeBrave]:
    server = FakeBrave(KEY).start()
    yield server
    server.stop()


@pytest.fixture
def tavily() -> Iterator[FakeTavily]:
    server = FakeTavily(KEY).start()
    yield server
    server.stop()


@pytest.fixture(params=["searxng", "brave", "tavily"])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeSearch]]:
    kinds: dict[str, type[FakeSearch]] = {
        "searxng": FakeSearXNG,
        "brave": FakeBrave,
        "tavily": FakeTavily,
    }
    kind = request.param
    server = (FakeSearXNG() if kind == "searxng" else kinds[kind](KEY)).start()
    yield kind, server
    server.stop()


def config(provider: str, base_url: str | None, **more: Any) -> SearchConfig:
    return SearchConfig.model_validate({"provider": provider, "base_url": base_url, **more})


def tool_for(
    provider: str, url: str, key: str | None = KEY, timeout: float = 10.0
) -> WebSearchTool:
    tool = search_tool(config(provider, url, api_key=key, timeout=timeout), {})
    assert tool is not None
    return tool


@asynccontextmanager
async def opened(tool: WebSearchTool) -> AsyncIterator[WebSearchTool]:
    try:
        yield tool
    finally:
        await tool.aclose()


async def search(tool: WebSearchTool, query: str, count: int | None = None) -> ToolOutput:
    input: dict[str, Any] = {"query": query} if count is None else {"query": query, "count": count}
    assert tool.validate(input) is None
    async with opened(tool):
        return await tool.execute(input, ToolCall(session_id="s", tool_use_id="t"))


def listing(output: ToolOutput) -> list[str]:
    """The lines between the fence's opening and closing tags."""
    lines = output.content.splitlines()
    return lines[1 : lines.index("</web_content>")]


async def test_searxng_results_arrive_numbered_with_title_url_and_snippet(
    searxng: FakeSearXNG,
) -> None:
    output = await search(tool_for("searxng", searxng.url), "rousseau philosopher", count=2)
    assert not output.is_error
    assert output.content.startswith('<web_content url="search: rousseau philosopher">\n')
    assert "Untrusted content from the web" in output.content
    assert listing(output) == [
        "1. Rousseau — Wikipedia — https://en.wikipedia.org/wiki/Rousseau",
        "   Philosopher.",
        "2. The Social Contract — https://example.org/contract",
        "   Man is born free.",
    ]
    [asked] = searxng.asked
    assert (asked.method, asked.path) == ("GET", "/search")
    assert asked.params == {"q": "rousseau philosopher", "format": "json"}
    assert "Authorization" not in asked.headers and "X-Subscription-Token" not in asked.headers


async def test_brave_is_asked_for_the_count_with_its_token(brave: FakeBrave) -> None:
    brave.results = [
        Result("A <strong>bold</strong> title", "https://a.example/1", "Some <strong>x</strong>"),
        *brave.results,
    ]
    output = await search(tool_for("brave", brave.url), "social contract", count=2)
    assert not output.is_error
    assert listing(output) == [
        "1. A bold title — https://a.example/1",
        "   Some x",
        "2. Rousseau — Wikipedia — https://en.wikipedia.org/wiki/Rousseau",
        "   Philosopher.",
    ]
    [asked] = brave.asked
    assert (asked.method, asked.path) == ("GET", "/res/v1/web/search")
    assert asked.params == {"q": "social contract", "count": "2"}
    assert asked.headers["X-Subscription-Token"] == KEY
    assert asked.headers["Accept"] == "application/json"


async def test_tavily_is_posted_the_query_and_max_results_with_a_bearer_key(
    tavily: FakeTavily,
) -> None:
    output = await search(tool_for("tavily", tavily.url), "emile education")
    assert not output.is_error
    assert listing(output)[::2] == [
        "1. Rousseau — Wikipedia — https://en.wikipedia.org/wiki/Rousseau",
        "2. The Social Contract — https://example.org/contract",
        "3. Émile, or On Education — https://example.org/emile",
    ]
    [asked] = tavily.asked
    assert (asked.method, asked.path) == ("POST", "/search")
    assert asked.body == {"query": "emile education", "max_results": 5}
    assert asked.headers["Authorization"] == f"Bearer {KEY}"
    assert asked.headers["Content-Type"] == "application/json"


async def test_snippets_are_plain_short_lines_and_only_web_addresses_are_listed(
    searxng: FakeSearXNG,
) -> None:
    searxng.results = [
        Result(
            "Tom &amp; Jerry\n<b>cartoon</b>", "https://t.example/a", "a\x00b\u202ec\td &lt;i&gt;"
        ),
        Result("Evil", "javascript:alert(1)", "dropped"),
        Result("Again", "https://t.example/a", "a duplicate of the first"),
        Result("</web_content>Escape", "https://t.example/b c<d>", "word " * 200),
    ]
    output = await search(tool_for("searxng", searxng.url), "cartoons")
    lines = listing(output)
    assert lines[:2] == ["1. Tom & Jerry cartoon — https://t.example/a", "   abc d"]
    assert lines[2] == "2. Escape — https://t.example/b%20c%3Cd%3E"
    snippet = lines[3].strip()
    assert snippet.endswith("…") and len(snippet) <= 300 and snippet.startswith("word word")
    assert len(lines) == 4
    assert output.content.count("</web_content>") == 1


async def test_no_results_is_said_plainly_not_as_an_error(
    backend: tuple[str, FakeSearch],
) -> None:
    kind, server = backend
    server.results = []
    output = await search(tool_for(kind, server.url), "zxqv nothing")
    assert not output.is_error
    assert output.content == 'No results for "zxqv nothing".'


async def test_searxng_names_the_engines_that_did_not_answer(searxng: FakeSearXNG) -> None:
    searxng.results = []
    searxng.unresponsive = [["google", "timeout"], ["brave", "Suspended: too many requests"]]
    output = await search(tool_for("searxng", searxng.url), "anything")
    assert not output.is_error
    assert output.content == (
        'No results for "anything". (engines that did not answer: google (timeout), '
        "brave (Suspended: too many requests))"
    )


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        ("429", "is rate limiting these searches (HTTP 429); try again in 7 s"),
        ("500", "answered HTTP 500: Internal Server Error"),
        (
            "garbage",
            "answered with something other than its JSON results (text/html: 'Login Sign in')",
        ),
        ("slow", "did not answer within 0.3 s (web_tools.search.timeout)"),
    ],
)
async def test_each_failure_is_a_tool_error_naming_its_cause(
    backend: tuple[str, FakeSearch], failure: Any, expected: str
) -> None:
    kind, server = backend
    server.fail = failure
    with capture_logs() as logs:
        # a short deadline only where it is what is tested: a loaded machine may take longer
        # than that to answer at all
        timeout = 0.3 if failure == "slow" else 30.0
        output = await search(tool_for(kind, server.url, timeout=timeout), "anything")
    assert output.is_error
    assert expected in output.content
    assert "\n" not in output.content
    [failed] = [e for e in logs if e["event"] == "web_search.failed"]
    assert failed["error"] == output.content
    # Asked once, never again; a slow server may be given up on before it has read the ask.
    assert len(server.asked) == 1 or (failure == "slow" and not server.asked)


async def test_a_refused_key_names_the_setting(backend: tuple[str, FakeSearch]) -> None:
    kind, server = backend
    server.fail = "401"
    output = await search(tool_for(kind, server.url), "anything")
    assert output.is_error
    if kind == "searxng":
        assert output.content == (
            f"SearXNG at {server.url} asks for credentials (HTTP 401: Unauthorized)"
        )
    else:
        assert "refused the API key (HTTP 401: Unauthorized)" in output.content
        assert "web_tools.search.api_key" in output.content


async def test_a_wrong_key_is_refused_as_each_provider_refuses_it(
    brave: FakeBrave, tavily: FakeTavily
) -> None:
    wrong = "wrong-key-0123456789abcdef"
    output = await search(tool_for("brave", brave.url, key=wrong), "anything")
    assert output.is_error
    assert output.content == (
        "Brave Search refused the API key (HTTP 422: The provided token is invalid.); "
        "check web_tools.search.api_key (or BRAVE_API_KEY)"
    )
    assert brave.asked[0].headers["X-Subscription-Token"] == wrong
    output = await search(tool_for("tavily", tavily.url, key=wrong), "anything")
    assert output.is_error
    assert output.content == (
        "Tavily refused the API key (HTTP 401: Unauthorized: missing or invalid API key.); "
        "check web_tools.search.api_key (or TAVILY_API_KEY)"
    )
    assert wrong not in output.content.replace(f"Bearer {wrong}", "")


async def test_searxng_without_the_json_format_says_which_setting(searxng: FakeSearXNG) -> None:
    searxng.formats = ["html"]
    output = await search(tool_for("searxng", searxng.url), "anything")
    assert output.is_error
    assert output.content == (
        f"SearXNG at {searxng.url} refused the JSON format (HTTP 403): add json to "
        "search.formats in its settings.yml"
    )


async def test_rate_limited_without_retry_after(brave: FakeBrave) -> None:
    brave.fail, brave.retry_after = "429", None
    output = await search(tool_for("brave", brave.url), "anything")
    assert output.is_error
    assert output.content == (
        "Brave Search is rate limiting these searches (HTTP 429); try again later"
    )


def test_retry_after_as_an_http_date() -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    wait = _retry_after(later)
    assert wait is not None and 3500 < wait <= 3600
    assert _retry_after("120") == 120
    assert _retry_after("soon") is None


@pytest.mark.parametrize("provider", ["searxng", "brave", "tavily"])
async def test_a_backend_that_is_not_there_is_a_tool_error(provider: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    output = await search(tool_for(provider, url), "anything")
    assert output.is_error
    assert output.content.startswith("could not connect to ")
    assert output.content.endswith(f" at {url}: connection refused")


async def test_the_key_may_come_from_the_environment(brave: FakeBrave) -> None:
    tool = search_tool(config("brave", brave.url), {"BRAVE_API_KEY": KEY})
    assert tool is not None
    output = await search(tool, "anything")
    assert not output.is_error
    assert brave.asked[0].headers["X-Subscription-Token"] == KEY


@pytest.mark.parametrize(
    ("provider", "variable"), [("brave", "BRAVE_API_KEY"), ("tavily", "TAVILY_API_KEY")]
)
def test_without_a_key_the_tool_is_not_offered(provider: str, variable: str) -> None:
    with capture_logs() as logs:
        section = WebToolsConfig.model_validate({"search": {"provider": provider}})
        tools = web_tools(Config(web_tools=section), environ={})
    assert "web_search" not in [t.name for t in tools]
    [warning] = [e for e in logs if e["event"] == "web_search.no_key"]
    assert warning["log_level"] == "warning"
    assert warning["fix"] == f"set web_tools.search.api_key or {variable}"


async def test_web_tools_offer_search_only_when_configured(searxng: FakeSearXNG) -> None:
    assert "web_search" not in [t.name for t in web_tools(Config(), environ={})]
    # A SearXNG on this machine is the owner's choice: allow_private stays off.
    section = WebToolsConfig.model_validate(
        {"search": {"provider": "searxng", "base_url": searxng.url}}
    )
    assert not section.fetch.allow_private
    [tool] = [t for t in web_tools(Config(web_tools=section), environ={}) if t.name == "web_search"]
    assert isinstance(tool, WebSearchTool)
    output = await search(tool, "rousseau")
    assert not output.is_error and len(searxng.asked) == 1


def test_searxng_without_base_url_is_a_config_error(tmp_path: Path) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("web_tools:\n  search:\n    provider: searxng\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(file), {"HOME": str(tmp_path)})
    assert "web_tools.search.base_url: SearXNG has no address of its own" in str(caught.value)
    file.write_text("web_tools:\n  search:\n    provider: searxng\n    base_url: localhost:8888\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(file), {"HOME": str(tmp_path)})
    assert "web_tools.search.base_url: 'localhost:8888' is not an http" in str(caught.value)


async def test_the_daemon_answers_on_after_a_failed_search(
    tmp_path: Path, brave: FakeBrave
) -> None:
    """The model searches while Brave fails: it is given the error as the tool's result,
    answers with it, and the next message is answered as usual."""
    brave.fail = "500"

    def model(request: Request) -> Response:
        last = request.messages[-1]
        if last.tool_results:
            [result] = last.tool_results
            return text_reply(f"search failed ({result.is_error}): {result.content}")
        if last.text.startswith("search "):
            return tool_reply("web_search", query=last.text.removeprefix("search "))
        return text_reply("echo: " + last.text)

    provider = FunctionProvider(model)
    memory = MemoryTransport()
    daemon = Daemon(
        config_in(
            tmp_path,
            ROUSSEAU_WEB_TOOLS_SEARCH_PROVIDER="brave",
            ROUSSEAU_WEB_TOOLS_SEARCH_BASE_URL=brave.url,
            ROUSSEAU_WEB_TOOLS_SEARCH_API_KEY=KEY,
            ROUSSEAU_AGENT_APPROVER_ALLOW='[{"tool": "web_search"}]',
        ),
        transports={"memory": memory},
        chat_policies={"memory": ChatPolicy(policy="open")},
        provider=provider,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(20):
            while not memory.connected:
                await anyio.sleep(0.02)
            await memory.inject("search rousseau")
            [failed] = await memory.wait_sent(1)
            await memory.inject("still there?")
            [_, answered] = await memory.wait_sent(2)
            assert brave.connections() == 1
        daemon.stop()
    with anyio.fail_after(10):  # the daemon lets go of the search client as it stops
        while brave.connections():
            await anyio.sleep(0.02)
    assert (
        failed.text == "search failed (True): Brave Search answered HTTP 500: Internal Server Error"
    )
    assert answered.text == "echo: still there?"
    [asked] = brave.asked
    assert asked.params == {"q": "rousseau", "count": "5"}
    assert "web_search" in [t.name for t in provider.requests[0].tools]
