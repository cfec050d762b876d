"""The splitter: every part within the limit, words kept in order, code fences balanced."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rousseau.transports.split import split_message, utf16_len

FENCE_LINE = re.compile(r"^[ \t]*(```+|~~~+)")


def words_without_fences(text: str) -> list[str]:
    return [w for line in text.split("\n") if not FENCE_LINE.match(line) for w in line.split()]


def balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if FENCE_LINE.match(line)) % 2 == 0


word = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n `~"), min_size=1, max_size=12
)
line = st.lists(word, min_size=0, max_size=14).map(" ".join)
code_block = st.tuples(st.sampled_from(["", "python", "sh"]), st.lists(line, max_size=25)).map(
    lambda t: "```" + t[0] + "\n" + "\n".join(t[1]) + "\n```"
)
paragraph = st.lists(line, min_size=1, max_size=6).map("\n".join)
document = st.lists(st.one_of(paragraph, code_block), min_size=1, max_size=12).map("\n\n".join)


@settings(max_examples=300, deadline=None)
@given(document, st.integers(min_value=40, max_value=600))
def test_parts_fit_keep_words_and_balance_fences(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert all(len(p) <= limit for p in parts), [len(p) for p in parts]
    assert words_without_fences("\n".join(parts)) == words_without_fences(text)
    if sum(1 for ln in text.split("\n") if FENCE_LINE.match(ln)) % 2 == 0:
        assert all(balanced(p) for p in parts)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=3000), st.integers(min_value=40, max_value=500))
def test_any_text_fits_in_utf16_units(text: str, limit: int) -> None:
    parts = split_message(text, limit, measure=utf16_len)
    assert all(utf16_len(p) <= limit for p in parts)
    assert "".join("".join(p.split()) for p in parts) == "".join(
        "".join(ln.split()) for ln in text.strip("\n").split("\n") if not FENCE_LINE.match(ln)
    ) or any(FENCE_LINE.match(ln) for ln in text.split("\n"))


def test_short_text_is_one_part() -> None:
    assert split_message("hello", 4096) == ["hello"]


def test_prefers_paragraph_then_line_breaks() -> None:
    text = "a" * 60 + "\n\n" + "b" * 30 + "\n" + "c" * 30
    assert split_message(text, 100) == ["a" * 60, "b" * 30 + "\n" + "c" * 30]


def test_code_block_cut_reopens_with_its_language() -> None:
    code = "\n".join(f"print({i})" for i in range(40))
    parts = split_message("Here:\n\n```python\n" + code + "\n```\nDone.", 120)
    assert len(parts) > 2
    for part in parts[1:-1]:
        assert part.startswith("```python\n") and part.endswith("\n```")
    assert all(balanced(p) for p in parts)


def test_never_splits_an_emoji_sequence() -> None:
    family = "👨\u200d👩\u200d👧\u200d👦"
    text = ("x" * 35 + family) * 5
    for part in split_message(text, 40, measure=utf16_len):
        assert "\u200d" != part[-1] and "\u200d" != part[0]
        assert not ("\ud800" <= part[-1] <= "\udbff")
    joined = "".join(split_message(text, 40, measure=utf16_len))
    assert joined.count(family) == 5
