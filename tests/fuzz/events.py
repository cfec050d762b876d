"""Malformed platform events for the fuzz suite, and the property every adapter must hold.

An event is made from a valid one (as the platform sends it) by spoiling a few of its fields:
a value of the wrong type, a key removed, a huge string, a lone surrogate put in a string,
nested junk. The adapter's boundary reads it and must never raise; what it cannot read it
records (`TRANSPORT.bad_...` with a reason) and hands nothing over; what it hands over is a
message the router and the store can take (string ids, texts that encode as UTF-8).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from rousseau.messages import Inbound

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
"""Bounded, so the whole suite runs in well under a minute on two cores."""

HUGE = "x" * 100_000 + "\ud800"
"""100,000 characters and a lone surrogate (a field no platform should send)."""

odd_text = st.text(st.characters(categories=("L", "N", "P", "S", "Zs", "Cc", "Cs")), max_size=12)
"""Short texts, control characters and lone surrogates among them."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
    st.sampled_from(["", "0", "-1", "1e400", "nan", HUGE]),
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=4,
)
"""Any JSON-ish value (and some JSON cannot carry: NaN, huge integers)."""


def places(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a nested event: each field and each item of a list."""
    found: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found.append((value, key))
            found.extend(places(inner))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found.append((value, index))
            found.extend(places(inner))
    return found


_HOW = ("junk", "drop", "surrogate", "huge", "retype")


@st.composite
def spoiled(draw: st.DrawFn, valid: dict[str, Any], *, keep: tuple[str, ...] = ()) -> Any:
    """`valid`, one to three of its fields spoiled (never the top-level keys in `keep`)."""
    event = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        where = [(c, k) for c, k in places(event) if not (c is event and k in keep)]
        if not where:
            break
        container, key = where[draw(st.integers(0, len(where) - 1))]
        old = container[key]
        how = _HOW[draw(st.integers(0, len(_HOW) - 1))]
        if how == "drop":
            del container[key]
        elif how == "surrogate" and isinstance(old, str):
            at = draw(st.integers(0, len(old)))
            lone = chr(draw(st.integers(0xD800, 0xDFFF)))
            container[key] = old[:at] + lone + old[at:]
        elif how == "huge":
            container[key] = HUGE
        elif how == "retype" and isinstance(old, int | str):
            container[key] = str(old) if isinstance(old, int) else len(old)
        else:
            container[key] = draw(junk)
    return event


def sound(inbound: Inbound) -> None:
    """What the router and the store need of a message: non-empty string ids, texts that
    encode as UTF-8 (so JSON, SQLite and PostgreSQL take them) with no NUL, a finite time."""
    for name in ("transport", "chat_id", "sender_id", "message_id", "thread_id"):
        value = getattr(inbound, name)
        if name == "thread_id" and value is None:
            continue
        assert isinstance(value, str) and value, (name, value)
        value.encode("utf-8")
        assert "\x00" not in value, name
    for name in ("text", "sender_name"):
        value = getattr(inbound, name)
        assert isinstance(value, str), (name, type(value))
        value.encode("utf-8")
        assert "\x00" not in value, name
    assert isinstance(inbound.at, int | float) and math.isfinite(inbound.at)
    json.dumps([inbound.text, inbound.sender_name, inbound.chat_id], ensure_ascii=False)


def refusals(logs: list[dict[str, Any]], transport: str) -> list[dict[str, Any]]:
    """The events the adapter recorded as failed (`TRANSPORT.bad_event` and its kin)."""
    return [e for e in logs if str(e["event"]).startswith(f"{transport}.bad_")]


def held(read: Inbound | None, logs: list[dict[str, Any]], transport: str) -> None:
    """The property: what was handed over is sound; what was refused was refused alone
    (nothing handed over) and with its reason."""
    refused = refusals(logs, transport)
    for record in refused:
        assert record["reason"], record
    if read is not None:
        assert not refused, refused
        sound(read)
