"""Approvals a person gives: asked and answered in chat (chat.py), shown to the owner as
all of the call's input (render.py), with bash lines read into the parts rules match (shell.py).
"""

from __future__ import annotations

from rousseau.approvals.chat import ANSWER, MAX_PENDING, ChatApprovals, Notify, Relay
from rousseau.approvals.render import asking_what_shows, preview, unseen, visible
from rousseau.approvals.shell import MAX_PARSED, SPLITTERS, load_shell_parser, split_bash

__all__ = [
    "ANSWER",
    "MAX_PARSED",
    "MAX_PENDING",
    "SPLITTERS",
    "ChatApprovals",
    "Notify",
    "Relay",
    "asking_what_shows",
    "load_shell_parser",
    "preview",
    "split_bash",
    "unseen",
    "visible",
]
