"""Whether a line names the bot, on platforms where a mention is only its nick typed in the
text (IRC, XMPP rooms): no markup to find, so the nick must stand as a word of its own."""

from __future__ import annotations

NICK_CHARACTERS = "_-[]\\`^{}|"
"""What may be part of a nick besides letters and digits (IRC's set, the widest in use)."""


def names(text: str, nick: str) -> bool:
    """Whether `text` names `nick` as a whole word, in any case (`bot: hi`, `hi Bot!`, not
    `bots` or `robot`)."""
    lowered, nick = text.lower(), nick.lower()
    if not nick:
        return False
    start = 0
    while (at := lowered.find(nick, start)) >= 0:
        end = at + len(nick)
        before = lowered[at - 1] if at else " "
        after = lowered[end] if end < len(lowered) else " "
        if not _in_nick(before) and not _in_nick(after):
            return True
        start = at + 1
    return False


def _in_nick(character: str) -> bool:
    return character.isalnum() or character in NICK_CHARACTERS
