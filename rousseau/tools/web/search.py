"""The web_search tool: a query sent to the search backend the owner chose (a SearXNG of their
own, Brave Search or Tavily), its answers shown as numbered `title — url` lines, each with a
snippet, fenced as untrusted web content. Every failure is a one-line tool error the model
reads; none stops the turn.

The backend's address is the owner's choice, so it is not held to the address rules of
web_fetch: a SearXNG on this machine works without allow_private.
"""

from __future__ import annotations

import email.utils
import errno
import html
import json
import math
import re
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlsplit

import anyio
import structlog

from rousseau.agent.protocols import ToolCall, ToolOutput
from rousseau.tools.base import Tool
from rousseau.tools.web.fetch import untrusted
from rousseau.tools.web.fetcher import USER_AGENT

if TYPE_CHECKING:
    import httpx

    from rousseau.config.web_tools import SearchConfig

__all__ = [
    "Ask",
    "Brave",
    "Hit",
    "SearXNG",
    "SearchError",
    "Searcher",
    "Tavily",
    "WebSearchTool",
    "search_tool",
]

log = structlog.get_logger("rousseau.tools")

DEFAULT_COUNT = 5
MAX_COUNT = 10
SNIPPET_CHARS = 300
TITLE_CHARS = 200
MAX_BODY = 4_000_000
"""The most an answer may weigh: a page of results is tens of kilobytes."""
KEY_SETTING = "web_tools.search.api_key"


class SearchError(Exception):
    """The search failed; the message, one line, says why for the model (and the owner)."""


class Malformed(Exception):
    """An answer that is not the provider's JSON results; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True, slots=True)
class Ask:
    """One HTTP request to a search backend."""

    method: str
    url: str
    params: dict[str, str] | None = None
    body: dict[str, Any] | None = None
    """Sent as JSON."""
    headers: dict[str, str] = field(default_factory=dict)


class Searcher(ABC):
    """One search backend: the request a query becomes, and how its answer is read."""

    label: ClassVar[str]
    """The backend's name in messages."""
    home: ClassVar[str | None] = None
    """Its address when base_url is not set (None: it has none of its own)."""
    key_variable: ClassVar[str | None] = None
    """The environment variable its key may come from (None: it takes no key)."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    @abstractmethod
    def ask(self, query: str, count: int) -> Ask:
        """The request for `count` results of `query`."""

    @abstractmethod
    def hits(self, answer: Any) -> list[Hit]:
        """The results in a decoded JSON answer; raises Malformed if it is not the shape."""

    def none_found(self, answer: Any) -> str:
        """What to add to "No results": why there may be none (default: nothing)."""
        return ""

    def refuses_key(self, status: int, answer: Any) -> bool:
        """The answer says the key is wrong, missing or not allowed this."""
        return status in (401, 403)

    def refusal(self, status: int, answer: Any, detail: str) -> str | None:
        """What an answer that refuses the request means, or None if it is no refusal."""
        if not self.refuses_key(status, answer):
            return None
        where = f" (or {self.key_variable})" if self.key_variable else ""
        return (
            f"{self.label} refused the API key (HTTP {status}{_colon(detail)}); "
            f"check {KEY_SETTING}{where}"
        )


class SearXNG(Searcher):
    """A SearXNG instance's JSON API (`json` must be in its search.formats setting)."""

    label = "SearXNG"

    def ask(self, query: str, count: int) -> Ask:
        # SearXNG has no result count: a page is about 20, cut to `count` here.
        return Ask(
            "GET",
            f"{self.base_url}/search",
            params={"q": query, "format": "json"},
            headers={"Accept": "application/json"},
        )

    def hits(self, answer: Any) -> list[Hit]:
        return _hits(_list(answer, "results"), snippet="content")

    def refusal(self, status: int, answer: Any, detail: str) -> str | None:
        if status == 403:
            return (
                f"SearXNG at {self.base_url} refused the JSON format (HTTP 403): add json to "
                "search.formats in its settings.yml"
            )
        if status == 401:
            return f"SearXNG at {self.base_url} asks for credentials (HTTP 401{_colon(detail)})"
        return None

    def none_found(self, answer: Any) -> str:
        """The engines that did not answer, as SearXNG lists them."""
        engines = answer.get("unresponsive_engines") if isinstance(answer, dict) else None
        if not isinstance(engines, list):
            return ""
        named = _clean(
            ", ".join(
                f"{e[0]} ({e[1]})" if len(e) > 1 and e[1] else str(e[0])
                for e in engines
                if isinstance(e, list) and e
            )
        )
        return f" (engines that did not answer: {named})" if named else ""


class Brave(Searcher):
    """Brave Search's web search API."""

    label = "Brave Search"
    home = "https://api.search.brave.com"
    key_variable = "BRAVE_API_KEY"

    def ask(self, query: str, count: int) -> Ask:
        return Ask(
            "GET",
            f"{self.base_url}/res/v1/web/search",
            params={"q": query, "count": str(count)},
            headers={"Accept": "application/json", "X-Subscription-Token": self.api_key or ""},
        )

    def hits(self, answer: Any) -> list[Hit]:
        if not isinstance(answer, dict):
            raise Malformed("not a JSON object")
        web = answer.get("web")
        if web is None:  # nothing on the web for this query (news or videos alone, or none)
            if answer.get("type") != "search":
                raise Malformed("no web results and no search type")
            return []
        return _hits(_list(web, "results"), snippet="description")

    def refuses_key(self, status: int, answer: Any) -> bool:
        # Brave answers an unknown token 422, error.code SUBSCRIPTION_TOKEN_INVALID.
        error = answer.get("error") if isinstance(answer, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        token = isinstance(code, str) and code.startswith("SUBSCRIPTION_TOKEN")
        return token or super().refuses_key(status, answer)


class Tavily(Searcher):
    """Tavily's search API."""

    label = "Tavily"
    home = "https://api.tavily.com"
    key_variable = "TAVILY_API_KEY"

    def ask(self, query: str, count: int) -> Ask:
        return Ask(
            "POST",
            f"{self.base_url}/search",
            body={"query": query, "max_results": count},
            headers={"Accept": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )

    def hits(self, answer: Any) -> list[Hit]:
        return _hits(_list(answer, "results"), snippet="content")


SEARCHERS: dict[str, type[Searcher]] = {"searxng": SearXNG, "brave": Brave, "tavily": Tavily}


def search_tool(config: SearchConfig, environ: Mapping[str, str]) -> WebSearchTool | None:
    """The tool `config` describes, or None (with a warning) when its provider needs a key
    that neither the config nor the environment gives."""
    kind = SEARCHERS[config.provider]
    key = config.api_key.get_secret_value() if config.api_key is not None else ""
    if not key and kind.key_variable:
        key = environ.get(kind.key_variable, "").strip()
    if kind.key_variable and not key:
        log.warning(
            "web_search.no_key",
            provider=config.provider,
            fix=f"set {KEY_SETTING} or {kind.key_variable}",
        )
        return None
    base = config.base_url or kind.home or ""  # the config requires SearXNG's
    return WebSearchTool(kind(base, key or None), timeout=config.timeout)


class WebSearchTool(Tool):
    name = "web_search"
    description = (
        "Search the web. Returns numbered results, each a title and its URL, then a snippet. "
        "Read a result in full with web_fetch."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 400,
                "description": "What to search for, as typed into a search box.",
            },
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_COUNT,
                "description": f"How many results (default {DEFAULT_COUNT}).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, searcher: Searcher, *, timeout: float) -> None:
        self.searcher = searcher
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        query = " ".join(_printable(str(input["query"])).split())
        if not query:
            return ToolOutput(content="the query is empty", is_error=True)
        count = int(input.get("count", DEFAULT_COUNT))
        started = time.monotonic()
        try:
            hits, empty = await self._search(query, count)
        except SearchError as exc:
            log.warning("web_search.failed", provider=self.searcher.label, error=str(exc))
            return ToolOutput(content=str(exc), is_error=True)
        log.info(
            "web_search.done",
            provider=self.searcher.label,
            results=len(hits),
            ms=round((time.monotonic() - started) * 1000),
        )
        if not hits:
            return ToolOutput(content=f'No results for "{query}".' + empty)
        lines = []
        for n, hit in enumerate(hits, 1):
            lines.append(f"{n}. {hit.title} — {hit.url}")
            if hit.snippet:
                lines.append(f"   {hit.snippet}")
        shown = query.replace('"', "'")
        return ToolOutput(content=untrusted(f"search: {shown}", "\n".join(lines)))

    async def _search(self, query: str, count: int) -> tuple[list[Hit], str]:
        """(at most `count` results, a note for when there are none)."""
        searcher = self.searcher
        status, headers, body = await self._send(searcher.ask(query, count))
        answer: Any = None
        try:
            answer = json.loads(body)
        except ValueError:
            pass
        if 200 <= status < 300:
            try:
                if answer is None:
                    raise Malformed(_peek(headers, body))
                hits = _distinct(searcher.hits(answer))[:count]
            except Malformed as exc:
                raise SearchError(
                    f"{searcher.label} answered with something other than its JSON results ({exc})"
                ) from None
            return hits, "" if hits else searcher.none_found(answer)
        detail = _detail(answer) if answer is not None else _clean(body.decode("utf-8", "replace"))
        detail = detail.replace(searcher.api_key, "***") if searcher.api_key else detail
        refused = searcher.refusal(status, answer, detail)
        if refused is not None:
            raise SearchError(refused)
        if status == 429:
            wait = _retry_after(headers.get("retry-after"))
            when = f"; try again in {wait} s" if wait is not None else "; try again later"
            raise SearchError(f"{searcher.label} is rate limiting these searches (HTTP 429){when}")
        if 300 <= status < 400 and headers.get("location"):
            detail = f"a redirect to {_clean(headers['location'])}; is base_url right?"
        raise SearchError(f"{searcher.label} answered HTTP {status}{_colon(detail)}")

    async def _send(self, ask: Ask) -> tuple[int, httpx.Headers, bytes]:
        """(status, headers, body) of `ask`, the whole exchange within the timeout; network
        failures become SearchError."""
        import httpx

        label, origin = self.searcher.label, self.searcher.base_url
        client = self._client_()
        try:
            with anyio.fail_after(self.timeout):
                async with client.stream(
                    ask.method, ask.url, params=ask.params, json=ask.body, headers=ask.headers
                ) as response:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_BODY:
                            raise SearchError(f"{label} sent an answer over {MAX_BODY:,} bytes")
                    return response.status_code, response.headers, bytes(body)
        except (TimeoutError, httpx.TimeoutException):
            raise SearchError(
                f"{label} did not answer within {self.timeout:g} s (web_tools.search.timeout)"
            ) from None
        except httpx.ConnectError as exc:
            raise SearchError(f"could not connect to {label} at {origin}: {_why(exc)}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SearchError(
                f"the exchange with {label} at {origin} failed: {_why(exc)}"
            ) from None

    def _client_(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                timeout=self.timeout,
                trust_env=False,
                follow_redirects=False,
                headers={"User-Agent": USER_AGENT},
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _list(node: Any, key: str) -> list[Any]:
    value = node.get(key) if isinstance(node, dict) else None
    if not isinstance(value, list):
        raise Malformed(f"no {key} list")
    return value


def _hits(items: list[Any], *, snippet: str) -> list[Hit]:
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        url = _url(item.get("url"))
        if url is None:
            continue
        title = _clean(item.get("title"), TITLE_CHARS) or url
        found.append(Hit(title=title, url=url, snippet=_clean(item.get(snippet), SNIPPET_CHARS)))
    return found


def _distinct(hits: list[Hit]) -> list[Hit]:
    seen: set[str] = set()
    kept = []
    for hit in hits:
        if hit.url not in seen:
            seen.add(hit.url)
            kept.append(hit)
    return kept


_UNSAFE_IN_URL = re.compile(r'[\s<>"\\^`{|}]')


def _url(value: Any) -> str | None:
    """An http(s) URL as one safe line, or None for anything else (javascript:, garbage)."""
    if not isinstance(value, str):
        return None
    url = _printable(value).strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or len(url) > 2048:
        return None
    return _UNSAFE_IN_URL.sub(lambda m: quote(m.group()), url)


_HIDDEN = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"</?[A-Za-z][^<>]*>|<![^<>]*>")
_BREAK = re.compile(r"</?(?:p|br|div|li|tr|td|th|h[1-6]|title|table|ul|ol|hr)\b[^<>]*>", re.I)
"""Tags that end a line of text: a space where they were, so words stay apart."""


def _clean(value: Any, limit: int = SNIPPET_CHARS) -> str:
    """Text from the web as one plain line: tags gone, entities decoded, control and
    formatting characters removed, cut at a word boundary past `limit`."""
    if not isinstance(value, str):
        return ""
    text = _BREAK.sub(" ", _HIDDEN.sub(" ", value[: limit * 64]))
    text = _TAG.sub("", html.unescape(_TAG.sub("", text)))
    text = " ".join(_printable(text[: limit * 8]).split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:.") + "…"


def _printable(text: str) -> str:
    """`text` without control characters (line breaks become spaces) or invisible formatting
    ones (bidirectional overrides...), the zero-width joiner of emoji sequences kept."""
    return "".join(
        " " if c in "\t\n\r\v\f\x85\u2028\u2029" else c
        for c in text
        if not (unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n\r\v\f\x85\u200d")
    )


def _detail(answer: Any) -> str:
    """The human part of an error answer: Brave's error.detail, Tavily's detail.error, a
    message or error field; the JSON itself, short, when none of them is there."""
    node = answer
    for _ in range(3):
        if not isinstance(node, dict):
            break
        inner = next(
            (node[k] for k in ("error", "detail", "message") if node.get(k) not in (None, "")),
            None,
        )
        if isinstance(inner, str):
            return _clean(inner)
        if inner is None:
            break
        if isinstance(inner, dict) and isinstance(inner.get("detail"), str):
            return _clean(inner["detail"])
        node = inner
    return _clean(json.dumps(answer, ensure_ascii=False), 200)


def _peek(headers: httpx.Headers, body: bytes) -> str:
    kind = headers.get("content-type", "no content type").split(";")[0].strip()
    text = _clean(body[:2000].decode("utf-8", "replace"), 80)
    return f"{kind}: {text!r}" if text else f"{kind}, empty"


def _retry_after(value: str | None) -> int | None:
    """Seconds to wait, from a Retry-After of seconds or of an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, math.ceil(when.timestamp() - time.time()))


def _why(exc: BaseException) -> str:
    """A network failure in a few words: 'connection refused' and the like where the cause
    says so, else the library's message."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or (
            isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED
        ):
            return "connection refused"
        seen = seen.__cause__ or seen.__context__
    return _clean(str(exc), 200) or type(exc).__name__


def _colon(detail: str) -> str:
    return f": {detail}" if detail else ""
