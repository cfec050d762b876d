"""A page as the model reads it: Playwright's accessibility snapshot (roles, names, text, in
the page's order) with a `[ref=…]` kept only on what can be clicked or typed into, and cut
at a length a model can take in."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHARS = 20_000
INTERACTIVE = frozenset(
    {
        "button",
        "checkbox",
        "combobox",
        "link",
        "listbox",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "option",
        "radio",
        "searchbox",
        "slider",
        "spinbutton",
        "switch",
        "tab",
        "textbox",
        "treeitem",
    }
)
"""Roles the model may act on; anything else keeps its ref only when the page shows it
as clickable (a pointer cursor: a div with a click handler)."""
_LINE = re.compile(r"^(?P<indent>\s*)- (?P<role>[\w-]+)")
_REF = re.compile(r" \[ref=(?P<ref>[\w-]+)\]")
_POINTER = " [cursor=pointer]"


@dataclass(frozen=True, slots=True)
class PageText:
    text: str
    """The snapshot, its refs pruned, cut at MAX_CHARS."""
    refs: frozenset[str]
    """The refs it names (in the whole page, also past the cut)."""
    length: int
    """Characters before the cut."""

    @property
    def cut(self) -> bool:
        return len(self.text) < self.length


def page_text(snapshot: str, limit: int = MAX_CHARS) -> PageText:
    kept: list[str] = []
    refs: set[str] = set()
    for line in snapshot.splitlines():
        shaped = _shape(line, refs)
        if shaped is not None:
            kept.append(shaped)
    whole = "\n".join(kept)
    text = whole
    if len(whole) > limit:
        text = whole[: whole.rfind("\n", 0, limit + 1)] if "\n" in whole[:limit] else whole[:limit]
    return PageText(text=text, refs=frozenset(refs), length=len(whole))


def _shape(line: str, refs: set[str]) -> str | None:
    """The line with its ref only where it is one to act on (added to `refs`); None for a
    line that says nothing (an unnamed container)."""
    found = _LINE.match(line)
    ref = _REF.search(line)
    if found is None or ref is None:
        return line
    clickable = found["role"] in INTERACTIVE or _POINTER in line
    line = line.replace(_POINTER, "")
    if clickable:
        refs.add(ref["ref"])
        return line
    line = _REF.sub("", line)
    if line.strip() in ("- generic", "- generic:"):
        return None
    return line
