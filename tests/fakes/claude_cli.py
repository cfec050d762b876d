"""A stand-in for the `claude` CLI in print mode: reads the prompt on stdin, answers in JSON or
stream-json, keeps its sessions in FAKE_CLAUDE_STATE and logs each call to FAKE_CLAUDE_LOG.

FAKE_CLAUDE_MODE: "ok" (default), "fail" (exit 1 with a message on stderr), "error_result".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    prompt = sys.stdin.read()
    state = Path(os.environ["FAKE_CLAUDE_STATE"])
    state.mkdir(parents=True, exist_ok=True)
    with open(os.environ["FAKE_CLAUDE_LOG"], "a") as log:
        log.write(json.dumps({"args": args, "stdin": prompt}) + "\n")
    mode = os.environ.get("FAKE_CLAUDE_MODE", "ok")
    if "--version" in args:
        print("9.9.9 (Claude Code)")
        return 0
    if mode == "fail":
        print("Error: Invalid API key · Please run /login", file=sys.stderr)
        return 1

    def flag(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    session = flag("--session-id") or flag("--resume")
    assert session, "fake claude: no session flag"
    history = state / session
    if flag("--session-id") and history.exists():
        print(f"Error: Session ID {session} is already in use.", file=sys.stderr)
        return 1
    if flag("--resume") and not history.exists():
        print(f"No conversation found with session ID: {session}", file=sys.stderr)
        return 1
    turns = history.read_text().count("\n") + 1 if history.exists() else 1
    with history.open("a") as f:
        f.write(prompt.replace("\n", " ") + "\n")
    text = f"turn {turns}: {prompt}"
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": mode == "error_result",
        "result": "Credit balance is too low" if mode == "error_result" else text,
        "session_id": session,
        "usage": {
            "input_tokens": 11,
            "output_tokens": 7,
            "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 2,
        },
    }
    if flag("--output-format") == "json":
        print(json.dumps(result))
        return 0
    lines = [{"type": "system", "subtype": "init", "session_id": session}]
    if "--include-partial-messages" in args:
        for i in range(0, len(text), 5):
            lines.append(
                {
                    "type": "stream_event",
                    "event": {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": text[i : i + 5]},
                    },
                }
            )
    lines.append(
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }
    )
    lines.append(result)
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
