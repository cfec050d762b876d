"""Where a job's reply goes: `transport:recipient`, checked before a job is saved."""

from __future__ import annotations

import re

# What a recipient looks like on each platform (a chat id, as the transport sends to it).
_RECIPIENT = {
    "telegram": (re.compile(r"^-?\d+$"), "a chat id such as 42 or -1001234567890"),
    "slack": (re.compile(r"^[CDGU][A-Z0-9]{2,}$"), "a channel or user id such as C0123ABC"),
    "discord": (re.compile(r"^\d{5,}$"), "a channel id (digits)"),
    "matrix": (re.compile(r"^[!@][^:\s]+:\S+$"), "a room id such as !abc:example.org"),
    "whatsapp": (re.compile(r"^\d{5,}(@[\w.]+)?$"), "a phone number such as 15551234567"),
    "signal": (re.compile(r"^(\+\d{5,}|group:[A-Za-z0-9+/=]+)$"), "+15551234567 or group:ID"),
    "imessage": (
        re.compile(r"^(iMessage|SMS|any);[-+];\S+$"),
        "a chat guid such as iMessage;-;+15551234567",
    ),
    "email": (re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$"), "an address such as you@example.org"),
    "sms": (re.compile(r"^\+\d{6,15}$"), "a number in E.164 form such as +15551234567"),
}
TRANSPORT_NAMES = tuple(_RECIPIENT)


class TargetError(ValueError):
    pass


def parse_target(target: str) -> tuple[str, str]:
    """`telegram:42` -> ("telegram", "42"); raises TargetError with a one-line reason."""
    transport, sep, recipient = target.partition(":")
    if not sep or not recipient:
        raise TargetError(f"bad target {target!r}: use TRANSPORT:RECIPIENT, e.g. telegram:42")
    known = _RECIPIENT.get(transport)
    if known is None:
        raise TargetError(
            f"unknown transport {transport!r} in {target!r}: one of {', '.join(TRANSPORT_NAMES)}"
        )
    pattern, example = known
    if not pattern.match(recipient):
        raise TargetError(f"bad {transport} recipient {recipient!r}: {example}")
    return transport, recipient
