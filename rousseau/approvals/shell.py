"""A bash line read into the parts that bash allow rules must each match: its simple
commands, the commands inside its substitutions, its redirections to files.

The parser (bashlex) is imported on first use; a line it cannot take apart, or one that hides
code it does not open, has no parts, so only an explicit rule or a person can allow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rousseau.agent import Splitter


class _Unreadable(Exception):
    """The line holds something the parser does not take apart (so rules cannot see it)."""


_HIDDEN_CODE = ("`", "$(", "<(", ">(", "$[")
_QUIET_TARGETS = frozenset({"/dev/null"})


def _bashlex() -> Any:
    """The shell parser, imported on first use: it builds its tables on import (about 0.2 s)."""
    import bashlex  # type: ignore[import-untyped]  # no type information shipped

    return bashlex


def load_shell_parser() -> None:
    """Build the shell parser's tables now (the daemon does it on a thread at start-up),
    rather than on the event loop at the first approval."""
    _bashlex()


MAX_PARSED = 4096
"""Longer command lines are not parsed: only an explicit rule or a person can allow them."""


def split_bash(input: Mapping[str, Any]) -> list[str] | None:
    """A bash call's parts for allow rules: each simple command as written (its words, without
    its redirections), then the commands inside its substitutions (`$(…)`, backticks, `<(…)`)
    and each redirection to or from a file (`> out.txt`, `< in`, `2>> log`) as a part of its
    own. Duplicating a descriptor (`2>&1`) and `/dev/null` are not parts. None when the line
    cannot be parsed or hides code the parser does not open (`${x:-$(…)}`, a here-document
    that expands commands, arithmetic), or holds no command at all."""
    command = input.get("command")
    if not isinstance(command, str) or len(command) > MAX_PARSED:
        return None  # the parser is slow on long lines and runs on the event loop
    parts: list[str] = []
    try:
        for tree in _bashlex().parse(command):
            _walk(tree, command, parts)
    except Exception:  # bashlex says what it cannot read with several exception types
        return None
    return parts or None


def _walk(node: Any, source: str, parts: list[str]) -> None:
    kind = node.kind
    if kind == "command":
        words = [p for p in node.parts if p.kind != "redirect"]
        if words:
            parts.append(" ".join(source[w.pos[0] : w.pos[1]] for w in words))
        children = list(node.parts)
    elif kind == "redirect":
        _redirect(node, source, parts)
        return
    elif kind in ("commandsubstitution", "processsubstitution"):
        children = [node.command]
    elif kind in ("word", "assignment"):
        _check_word(node, source)
        children = list(node.parts)
    elif kind in ("parameter", "tilde", "reservedword", "operator", "pipe"):
        return
    elif kind in ("list", "pipeline", "compound", "if", "for", "while", "until", "function"):
        children = [*getattr(node, "parts", ()), *getattr(node, "list", ())]
        children += getattr(node, "redirects", ())
    else:
        raise _Unreadable(kind)
    for child in children:
        _walk(child, source, parts)


def _check_word(node: Any, source: str) -> None:
    """A word's text outside the substitutions the parser found holds no other code."""
    start, end = node.pos
    text = list(source[start:end])
    for sub in node.parts:
        if sub.kind in ("commandsubstitution", "processsubstitution"):
            text[sub.pos[0] - start : sub.pos[1] - start] = " " * (sub.pos[1] - sub.pos[0])
    rest = "".join(text)
    if any(mark in rest for mark in _HIDDEN_CODE):
        raise _Unreadable(rest)


def _redirect(node: Any, source: str, parts: list[str]) -> None:
    kind = node.type
    if kind in ("<<", "<<-"):
        body = node.heredoc.value if getattr(node, "heredoc", None) is not None else ""
        if any(mark in body for mark in _HIDDEN_CODE):
            raise _Unreadable(body)
        return
    target = node.output
    if isinstance(target, int) or target is None:
        return  # 2>&1, >&2: a descriptor, not a file
    _walk(target, source, parts)
    if kind == "<<<":
        return  # a here-string feeds its word, no file
    text = source[target.pos[0] : target.pos[1]]
    if text in _QUIET_TARGETS or (kind in (">&", "<&") and text == "-"):
        return
    fd = "" if getattr(node, "input", None) is None else str(node.input)
    parts.append(f"{fd}{kind} {text}")


SPLITTERS: Mapping[str, Splitter] = {"bash": split_bash}
"""The splitters the daemon, the CLI and the MCP server give their rules and previews."""
