"""The checks every adapter reads an event with: what is refused, what is repaired, and how a
refusal is recorded and counted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from rousseau.messages import Inbound
from rousseau.transports.unreadable import (
    Unreadable,
    checked,
    count_refused,
    ident,
    integer_id,
    number,
    refuse,
    repaired,
    text,
)


@given(st.text(st.characters(codec=None)))
@settings(max_examples=300, deadline=None)
def test_a_repaired_text_encodes_and_is_untouched_when_it_already_did(value: str) -> None:
    mended = repaired(value)
    mended.encode("utf-8")
    assert "\x00" not in mended
    if "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        assert mended is value


def test_lone_surrogates_and_nuls_become_u_fffd_and_a_pair_its_character() -> None:
    assert repaired("a\ud800b\udc80c\x00") == "a\ufffdb\ufffdc\ufffd"
    assert repaired("\ud83d\ude00") == "\U0001f600"  # both halves of a pair: one character


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (text, 5),
        (text, ["a"]),
        (ident, ""),
        (ident, 42),
        (ident, "a\x00"),
        (ident, "\ud800"),
        (integer_id, "42"),
        (integer_id, True),
        (number, float("nan")),
        (number, 10**400),
        (number, "1"),
    ],
)
def test_what_is_refused(check: object, value: object) -> None:
    with pytest.raises(Unreadable):
        check(value, "field")  # type: ignore[operator]


def test_a_checked_message_keeps_its_ids_and_repairs_its_texts() -> None:
    made = Inbound(
        transport="t", chat_id="c", sender_id="s", message_id="m", text="hi", sender_name="Ann"
    )
    assert checked(made) is made
    mended = checked(Inbound(**{**_fields(made), "text": "hi \ud800", "sender_name": "\x00"}))
    assert (mended.text, mended.sender_name) == ("hi \ufffd", "\ufffd")
    with pytest.raises(Unreadable, match="chat_id"):
        checked(Inbound(**{**_fields(made), "chat_id": 42}))  # type: ignore[arg-type]
    with pytest.raises(Unreadable, match="at"):
        checked(Inbound(**{**_fields(made), "at": float("inf")}))


def _fields(inbound: Inbound) -> dict[str, object]:
    return {f: getattr(inbound, f) for f in inbound.__slots__}  # type: ignore[attr-defined]


class _Transport:
    name = "demo"


def test_a_refusal_is_logged_with_its_reason_and_counted_for_its_transport() -> None:
    counted: list[str] = []
    one, other = _Transport(), _Transport()
    count_refused(one, lambda: counted.append("one"))
    with capture_logs() as logs:
        refuse(one, Unreadable("text is int, not a string"), message="x" * 10_000)
        refuse(other, KeyError("content"))
    assert [(e["event"], e["reason"]) for e in logs] == [
        ("demo.bad_event", "text is int, not a string"),
        ("demo.bad_event", "KeyError: 'content'"),
    ]
    assert len(logs[0]["message"]) < 400  # a huge id is cut in the log line
    assert logs[1]["exc_info"] is not None  # a gap in an adapter's checks: its traceback
    assert counted == ["one"]
