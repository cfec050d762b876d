"""The examples run as they are and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def run(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_embed_agent_runs() -> None:
    out = run("embed_agent.py")
    assert "[read {'path': 'todo.md'}]" in out
    assert "water the plants and call Ada." in out


def test_custom_tool_checks_its_schema() -> None:
    lines = run("custom_tool.py").splitlines()
    assert lines[0].startswith("[tool] invalid input for convert_distance: 'from' is a required")
    assert lines[1:] == ["[tool] 26.22 mi", "A marathon is about 26.22 miles."]


@pytest.mark.timeout(60)
def test_custom_transport_is_served_by_the_daemon() -> None:
    assert run("custom_transport.py").splitlines() == [
        "-> me: you said: hello",
        "-> me: you said: how are you?",
    ]
