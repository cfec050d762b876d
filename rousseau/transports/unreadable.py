"""What an adapter does with a platform event it cannot read: it records it as failed (a log
line with the reason, the `rousseau_failed_inbound` counter) and skips it at once.

A malformed event retried is a poison: it blocks every event behind it (a poll's offset, a
sync token, a cursor) and restarts its transport again and again. So each adapter reads an
event at its boundary with the helpers here, and whatever cannot be read there never goes
further, nor is it asked for again.

What is refused: an id that is not a non-empty string (or an integer, where the platform
numbers them), a text that is not a string, a timestamp that is not a finite number. What is
repaired instead: a lone UTF-16 surrogate or a NUL in a text or a name (neither can be stored
or sent on as JSON) becomes U+FFFD, and the message is answered.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol
from weakref import WeakKeyDictionary

import structlog

from rousseau.messages import Inbound

__all__ = [
    "Named",
    "Unreadable",
    "checked",
    "count_refused",
    "ident",
    "integer_id",
    "number",
    "optional_text",
    "refuse",
    "repaired",
    "text",
]

log = structlog.get_logger("rousseau.transports")

REASON_CHARS = 300
"""How much of a reason (or an id) is logged: an exception may quote a whole 100,000-character
field."""


class Named(Protocol):
    """A transport, as far as recording what it refused goes."""

    name: str


_counters: WeakKeyDictionary[Named, Callable[[], object]] = WeakKeyDictionary()


def count_refused(transport: Named, count: Callable[[], object]) -> None:
    """Call `count()` for each event `transport` refuses: the daemon binds its metrics'
    failed-inbound counter to each transport it runs."""
    _counters[transport] = count


class Unreadable(ValueError):
    """A platform event that cannot become an Inbound: a field missing or of the wrong type."""


def refuse(
    transport: Named, error: BaseException | str, *, event: str = "bad_event", **where: object
) -> None:
    """Record an event `transport` could not read, and why (`NAME.bad_event`, with what
    identifies it in `where`), and count it. An error other than Unreadable is a gap in the
    adapter's checks: its traceback is logged too."""
    if isinstance(error, str | Unreadable):
        reason, trace = str(error), None
    else:
        reason, trace = f"{type(error).__name__}: {error}", error
    shown = {key: _short(value) for key, value in where.items()}
    log.warning(f"{transport.name}.{event}", reason=_short(reason), exc_info=trace, **shown)
    count = _counters.get(transport)
    if count is not None:
        count()


def _short(value: object) -> object:
    """A string cut to REASON_CHARS (and repaired, so the log line itself can be written)."""
    if not isinstance(value, str):
        return value
    return repaired(value[:REASON_CHARS] + "…" if len(value) > REASON_CHARS else value)


def repaired(value: str) -> str:
    """`value` with each lone surrogate and NUL replaced by U+FFFD (a pair of surrogates is
    joined into the character it encodes); the very same string when there is nothing to
    mend."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return value


def text(value: object, what: str) -> str:
    """A text field: a string (repaired), or missing (None: empty); anything else refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {type(value).__name__}, not a string")
    return repaired(value)


def optional_text(value: object, what: str) -> str | None:
    """A text field that may be absent (None stays None)."""
    return None if value is None else text(value, what)


def ident(value: object, what: str) -> str:
    """An id as the Inbound keeps it: a non-empty string without surrogates or NULs."""
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {type(value).__name__}, not a string id")
    if not value or repaired(value) is not value:
        raise Unreadable(f"{what} is not a usable id ({len(value)} characters)")
    return value


def integer_id(value: object, what: str) -> str:
    """An id a platform numbers (a Telegram chat, a Discord snowflake): an int, as a string."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unreadable(f"{what} is {type(value).__name__}, not an integer")
    return str(value)


def number(value: object, what: str) -> float:
    """A timestamp or a size: a finite int or float (never a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unreadable(f"{what} is {type(value).__name__}, not a number")
    try:
        found = float(value)
    except OverflowError:  # an int past any float
        raise Unreadable(f"{what} is too large") from None
    if not math.isfinite(found):
        raise Unreadable(f"{what} is {found}")
    return found


def checked(inbound: Inbound) -> Inbound:
    """The Inbound as an adapter built it, its fields checked (Unreadable if one is not what
    the router and the store expect) and its texts repaired (see the module's docstring).

    The last step of every normaliser, on every message: a few type checks, and a scan of
    the texts for a NUL (and, past ASCII, for a lone surrogate)."""
    for what in ("chat_id", "sender_id", "message_id"):
        ident(getattr(inbound, what), what)
    if inbound.thread_id is not None:
        ident(inbound.thread_id, "thread_id")
    number(inbound.at, "at")
    said = text(inbound.text, "text")
    name = text(inbound.sender_name, "sender_name")
    if said is not inbound.text or name is not inbound.sender_name:
        return replace(inbound, text=said, sender_name=name)
    return inbound
