"""The documentation stays true: every config key described, every exported name documented,
and the reference generated from the model lists every key."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

import rousseau.agent
import rousseau.tools
from rousseau import docgen

ROOT = Path(__file__).parent.parent


def test_every_config_key_is_in_the_reference() -> None:
    text = docgen.config_reference()
    for path, _ in docgen.keys():
        key = ".".join(path[1:]) if len(path) > 1 else path[0]
        assert f"`{key}`" in text or f"## {path[0]}" in text, key
    assert "`ROUSSEAU_AGENT_MAX_ITERATIONS`" in text and "`TELEGRAM_BOT_TOKEN`" in text


def test_the_committed_reference_is_current() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == docgen.with_reference(page), (
        "docs/configuration.md is out of date: python -m rousseau.docgen docs/configuration.md"
    )


def test_a_key_without_a_description_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(BaseModel):
        documented: int = Field(default=1, description="has one")
        silent: int = 2

    monkeypatch.setattr(docgen, "Config", Broken)
    with pytest.raises(docgen.UndocumentedKey, match="config key silent has no description"):
        docgen.config_reference()


@pytest.mark.parametrize("module", [rousseau.agent, rousseau.tools])
def test_every_exported_name_has_its_own_docstring(module: object) -> None:
    missing = []
    for name in module.__all__:  # type: ignore[attr-defined]
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = obj.__doc__
        inherited = inspect.isclass(obj) and any(
            doc is base.__doc__ for base in obj.__mro__[1:] if base is not object
        )
        if not doc or not doc.strip() or inherited:
            missing.append(name)
    assert missing == []


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    listed = set(re.findall(r":\s+(\S+\.md)\s*$", nav, re.M))
    assert pages == listed
