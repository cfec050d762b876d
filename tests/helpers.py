"""Small things many tests need: the `rousseau` command as a user runs it, and a free port."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

_SCRIPT = Path(sys.executable).parent / "rousseau"
ROUSSEAU = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "rousseau"]
"""The installed console script, or the module when running from a source tree."""


def free_port() -> int:
    """A loopback port nothing listens on (right now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
