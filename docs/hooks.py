"""MkDocs hook: the configuration reference page is generated from the config model."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- config-reference -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from rousseau.docgen import config_reference

    return markdown.replace(MARKER, config_reference())
