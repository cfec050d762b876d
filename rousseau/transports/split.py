"""Split a reply under a platform's length limit without breaking what a reader sees.

Cuts fall on a paragraph break if one is near enough, else a line break, else a space; never
inside a surrogate pair or a grapheme (combining marks, joiners, variation selectors). A cut
inside a fenced code block closes the fence and re-opens it, with its language, in the next
part. Written by hand: no library splits Markdown for chat limits.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)(.*)$")
_MIN_FILL = 0.5  # a break must leave the part at least this full, or a finer break is used


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram and others count it."""
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def split_message(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Parts of `text`, each `measure(part) <= limit`, that read as the original in order."""
    if limit < 32:
        raise ValueError("limit too small to split sensibly")
    text = text.strip("\n")
    parts: list[str] = []
    reopen = ""  # the fence line the next part starts with, when a cut fell inside code
    while text:
        prefix = reopen + "\n" if reopen else ""
        budget = limit - measure(prefix)
        if measure(text) <= budget:
            parts.append(prefix + text)
            break
        cut, fence = _cut(text, budget, measure, reopen)
        head = text[:cut].rstrip()
        if fence:
            head += "\n" + _marker(fence)
        if head.strip():
            parts.append(prefix + head)
        rest = text[cut:]
        text = rest.lstrip("\n") if fence else rest.lstrip(" \n")
        reopen = fence
    return parts


def _cut(text: str, budget: int, measure: Callable[[str], int], reopen: str) -> tuple[int, str]:
    """Where to cut, and the fence line still open there ('' if none)."""
    hard = _fit(text, budget, measure)

    def fits(at: int, fence: str) -> bool:
        return not fence or measure(text[:at].rstrip() + "\n" + _marker(fence)) <= budget

    # First a break that leaves the part reasonably full, then any break, then a hard cut.
    for fill in (_MIN_FILL, 0.0):
        for sep in ("\n\n", "\n", " "):
            end = hard
            while True:
                at = text.rfind(sep, 0, end)
                if at <= 0 or at < hard * fill:
                    break
                end = at
                fence = _fence_state(text[:at], reopen)
                if fence and sep == " " and fill:
                    break  # inside code, break between lines unless a line cannot fit
                if fence and text[:at].rstrip().split("\n")[-1].strip() == fence:
                    continue  # do not leave a fence opened with nothing in it
                if fits(at, fence):
                    return at, fence
    at = _grapheme_boundary(text, hard)
    fence = _fence_state(text[:at], reopen)
    while at > 1 and not fits(at, fence):
        at = _grapheme_boundary(text, at - 1)
        fence = _fence_state(text[:at], reopen)
    return at, fence


def _marker(fence: str) -> str:
    m = _FENCE.match(fence)
    return m.group(1) if m else "```"


def _fence_state(prefix: str, reopen: str) -> str:
    """The fence line still open at the end of `prefix` ('' if none)."""
    current = reopen
    for line in prefix.split("\n"):
        m = _FENCE.match(line)
        if m is None:
            continue
        if not current:
            current = line.strip()
        elif m.group(1)[0] == current[0] and len(m.group(1)) >= len(_marker(current)):
            if not m.group(2).strip():
                current = ""
    return current


def _fit(text: str, budget: int, measure: Callable[[str], int]) -> int:
    """The longest prefix length whose measure is within budget."""
    if measure is len:
        return max(0, min(len(text), budget))
    lo, hi = 0, min(len(text), max(budget, 0))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _grapheme_boundary(text: str, at: int) -> int:
    """Move `at` back until it does not split a character sequence a reader sees as one."""
    start = at
    while 0 < at < len(text) and (_extends(text[at]) or text[at - 1] == "\u200d"):
        at -= 1
    # A run of joined characters longer than the whole part cannot be kept whole.
    return at if at > 0 else max(1, start)


def _extends(ch: str) -> bool:
    """Characters that attach to the one before them."""
    return (
        ch == "\u200d"
        or "\ufe00" <= ch <= "\ufe0f"
        or "\U0001f3fb" <= ch <= "\U0001f3ff"
        or "\U000e0020" <= ch <= "\U000e007f"
        or "\udc00" <= ch <= "\udfff"
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )
