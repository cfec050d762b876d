"""The examples run as they are and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_embed_agent_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "embed_agent.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "[read {'path': 'todo.md'}]" in result.stdout
    assert "water the plants and call Ada." in result.stdout
