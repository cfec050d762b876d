"""A fetched body as text a model reads: HTML as Markdown of its main content (trafilatura:
navigation, footers and boilerplate gone; title, headings, lists, links and tables kept),
PDF as its text (pypdf), JSON and text as they are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rousseau.tools.web.fetcher import Fetched

_TEXT_TYPES = ("text/", "application/xml", "application/javascript", "application/x-yaml")


class Unreadable(Exception):
    """A body of a kind no text can be made of (an image, an archive...)."""


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    title: str
    text: str


def page_of(fetched: Fetched) -> Page:
    """The page's title and text (blocking: run it in a worker thread)."""
    kind = fetched.media_type
    body = fetched.body
    if kind in ("text/html", "application/xhtml+xml") or (not kind and _looks_html(body)):
        return _html(fetched)
    if kind == "application/pdf" or body.startswith(b"%PDF-"):
        return Page(fetched.url, "", _pdf(body))
    if kind == "application/json" or kind.endswith("+json"):
        return Page(fetched.url, "", _json(_decoded(fetched)))
    if kind.startswith(_TEXT_TYPES) or not kind:
        return Page(fetched.url, "", _decoded(fetched))
    raise Unreadable(f"{fetched.url} is {kind}, which has no text to read")


def _looks_html(body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _html(fetched: Fetched) -> Page:
    import trafilatura

    # parsed once; without a charset in the header, trafilatura finds the page's own
    tree = trafilatura.load_html(_decoded(fetched) if fetched.charset else fetched.body)
    if tree is None:
        return Page(fetched.url, "", "")
    title = _title(tree)  # before extract, which prunes the tree
    text = trafilatura.extract(
        tree,
        url=fetched.url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_formatting=True,
        include_comments=False,
        favor_recall=True,
    )
    return Page(fetched.url, " ".join(title.split()), (text or "").strip())


def _title(tree: Any) -> str:
    """The page's own title: og:title, else <title>, else the first <h1> (trafilatura's
    metadata would also look for dates and authors: seconds on a large page)."""
    for found in (
        tree.xpath("string(//meta[@property='og:title']/@content)"),
        tree.xpath("string(//title)"),
        tree.xpath("string((//h1)[1])"),
    ):
        if str(found).strip():
            return str(found)
    return ""


def _pdf(body: bytes) -> str:
    from io import BytesIO

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError) as exc:
        raise Unreadable(f"the PDF could not be read ({exc})") from None
    return "\n\n".join(f"[page {n}]\n{text.strip()}" for n, text in enumerate(pages, 1))


def _json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=1, ensure_ascii=False)
    except ValueError:
        return text


def _decoded(fetched: Fetched) -> str:
    for charset in (fetched.charset, "utf-8"):
        if charset:
            try:
                return fetched.body.decode(charset)
            except (LookupError, UnicodeDecodeError):
                continue
    return fetched.body.decode("utf-8", errors="replace")
