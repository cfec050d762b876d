"""What the owner reads of a tool call: all of its input, with nothing invisible in it and
nothing cut from its end, and (for a tool with a splitter, such as bash) its parts one a line.
A command is shown whole or not asked about at all (`unseen`): what is cut from the middle
of a command could be anything.

The approval's answer is bound to the digest of that same input (chat.py), so what runs is
what the owner read.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

import structlog

from rousseau.agent import Splitter
from rousseau.agent.approval import ApprovalRequest, AskFn, Decision
from rousseau.approvals.shell import SPLITTERS

log = structlog.get_logger("rousseau.approvals")

PREVIEW_HEAD = 1200  # characters of a long input shown before the gap...
PREVIEW_TAIL = 600  # ...and after it, so that its end is always in sight
COMMAND_SHOWN = 4096  # characters of a command's input shown whole; a longer one is not asked
PART_HEAD, PART_TAIL = 160, 60  # the same for each listed command
PARTS_SHOWN = 30  # commands listed one a line; past that, the first and last half of these
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.S)
SPACES_SHOWN = 4  # a longer run of spaces is shown as its count
RUN_SHOWN = 16  # a longer run of any other character is shown as its count


def _char(char: str) -> str:
    """A character as the owner can see it: controls, format characters (bidirectional
    overrides, zero-width joiners), separators and unassigned code points by their number."""
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char != " " and unicodedata.category(char)[0] in "CZ":
        return f"<U+{ord(char):04X}>"
    return char


def _json_tokens(text: str) -> list[str]:
    """JSON text as tokens, each escape (`\\n`, `\\u0007`) one token."""
    tokens: list[str] = []
    at = 0
    for escape in _JSON_ESCAPE.finditer(text):
        tokens += [_char(c) for c in text[at : escape.start()]]
        tokens.append(escape.group())
        at = escape.end()
    return tokens + [_char(c) for c in text[at:]]


def _collapse(tokens: list[str]) -> list[str]:
    """Runs of one token, past a few, become one token that counts them (`<420 spaces>`)."""
    out: list[str] = []
    at = 0
    while at < len(tokens):
        token, end = tokens[at], at + 1
        while end < len(tokens) and tokens[end] == token:
            end += 1
        count = end - at
        if token == " " and count > SPACES_SHOWN:
            out.append(f"<{count:,} spaces>")
        elif count > RUN_SHOWN:
            out.append(f"<{count:,} times {token.strip('<>')}>")
        else:
            out += tokens[at:end]
        at = end
    return out


def _elide(tokens: list[str], head: int, tail: int) -> str:
    """All of it, or its head and its tail with the count of characters between."""
    total = sum(map(len, tokens))
    if total <= head + tail:
        return "".join(tokens)
    first = last = 0
    shown_head = shown_tail = 0
    while shown_head + len(tokens[first]) <= head:
        shown_head += len(tokens[first])
        first += 1
    while shown_tail + len(tokens[-1 - last]) <= tail:
        shown_tail += len(tokens[-1 - last])
        last += 1
    hidden = total - shown_head - shown_tail
    tail_text = "".join(tokens[len(tokens) - last :]) if last else ""
    return f"{''.join(tokens[:first])}… {hidden:,} characters not shown …{tail_text}"


def visible(text: str, head: int = PART_HEAD, tail: int = PART_TAIL) -> str:
    """Text from outside (a command, a stranger's id) with nothing invisible in it and its
    end in sight, for a person to read."""
    return _elide(_collapse([_char(c) for c in text]), head, tail)


def preview(
    tool: str, input: Mapping[str, Any], splitters: Mapping[str, Splitter] | None = None
) -> str:
    """A call's input as an owner reads it: its compact JSON with nothing invisible and its
    end always shown (a command's whole, see `unseen`), then (for a tool with a splitter,
    such as bash) its parts one a line."""
    raw = json.dumps(input, separators=(",", ":"), ensure_ascii=False)
    tokens = _collapse(_json_tokens(raw))
    split = (SPLITTERS if splitters is None else splitters).get(tool)
    if split is None:
        return _elide(tokens, PREVIEW_HEAD, PREVIEW_TAIL)
    lines = [_elide(tokens, COMMAND_SHOWN - PREVIEW_TAIL, PREVIEW_TAIL)]
    try:
        parts = split(input)
    except Exception:  # a splitter's failure only costs the listing
        parts = None
    if not parts:
        lines.append("Its commands could not be parsed: read the whole input above.")
    elif len(parts) > 1:
        lines.append(f"Parsed into {len(parts)} parts (commands, substitutions, redirections):")
        half = PARTS_SHOWN // 2
        numbered = list(enumerate(parts, 1))
        if len(parts) > PARTS_SHOWN:
            hidden = parts[half:-half]
            names = list(dict.fromkeys(visible(p.split(" ", 1)[0], 30, 10) for p in hidden))
            more = f", and {len(names) - 20:,} more" if len(names) > 20 else ""
            lines += [f"  {n}. {visible(p)}" for n, p in numbered[:half]]
            lines.append(
                f"  … {len(hidden):,} more not shown; they run {', '.join(names[:20])}{more}"
            )
            numbered = numbered[-half:]
        lines += [f"  {n}. {visible(p)}" for n, p in numbered]
    return "\n".join(lines)


def unseen(
    tool: str, input: Mapping[str, Any], splitters: Mapping[str, Splitter] | None = None
) -> str | None:
    """Why an owner could not read every command this call would run, so it must not be put
    to them (the model reads this); None when its preview shows them all.

    A command (a call of a tool with a splitter, such as bash) is shown whole up to
    COMMAND_SHOWN characters once runs are counted (`<420 spaces>`). The listing of its
    parts is no substitute for a longer one: here-documents and here-strings fed to a shell,
    and code in a `bash -c` argument, are not parts of their own."""
    if tool not in (SPLITTERS if splitters is None else splitters):
        return None
    raw = json.dumps(input, separators=(",", ":"), ensure_ascii=False)
    shown = sum(map(len, _collapse(_json_tokens(raw))))
    if shown <= COMMAND_SHOWN:
        return None
    return (
        f"this {tool} call is {shown:,} characters long as an owner would read it, over the "
        f"{COMMAND_SHOWN:,} an approval shows whole, so it was not put to anyone: no one can "
        "approve what they cannot read. Run it as shorter commands, or write it to a file "
        "first and run the file."
    )


def asking_what_shows(ask: AskFn, splitters: Mapping[str, Splitter] | None = None) -> AskFn:
    """`ask`, for calls whose every command an owner can read; any other is denied unasked,
    with the reason (`unseen`) for the model."""

    async def ask_shown(request: ApprovalRequest) -> bool | Decision:
        reason = unseen(request.tool, request.input, splitters)
        if reason is None:
            return await ask(request)
        log.info("approvals.not_asked", tool=request.tool, why="too long to show whole")
        return Decision.denied(reason, by="not asked: too long to show whole")

    return ask_shown
