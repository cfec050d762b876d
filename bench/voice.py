"""What a spoken reply costs beside the model: the answer made fit to be heard, and the
speech server's audio (a minute of it, as WAV at OpenAI's 24 kHz) transcoded by PyAV into an
OGG/Opus voice note, the way the daemon does it (rousseau.media.speech). Prints the CPU of
each against its target, the median of RUNS, and what importing PyAV costs the first spoken
reply (nothing audio-related is imported before it: tests/test_startup_imports.py).

    python bench/voice.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.speech import tone  # noqa: E402

RUNS = 5
SECONDS = 60.0


def main() -> None:
    imported = subprocess.run(
        [sys.executable, "-c", "import time; t = time.perf_counter(); import av; "
         "print(time.perf_counter() - t)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    from rousseau.media.speech import speakable, voice_note

    audio = tone(SECONDS)
    answer = "**A sentence** of the answer, with `code` and a [link](https://example.org). " * 60
    cpu = []
    for _ in range(RUNS):
        started = time.process_time()
        note = voice_note(audio)
        cpu.append(time.process_time() - started)
    prepared = []
    for _ in range(RUNS):
        started = time.process_time()
        speakable(answer, max_chars=1500, max_notes=3)
        prepared.append(time.process_time() - started)
    rows = [
        ("transcode 60 s to OGG/Opus: CPU", statistics.median(cpu), 1.0, "s"),
        ("  its voice note: seconds", note.duration, None, "s"),
        ("  its voice note: size", len(note.data) / 1024, None, "KiB"),
        ("make 5,000 characters speakable: CPU", statistics.median(prepared) * 1000, None, "ms"),
        ("import PyAV (the first spoken reply)", float(imported.stdout), None, "s"),
    ]
    print(f"{'figure':<40} {'value':>10}   target")
    for label, value, target, unit in rows:
        met = "" if target is None else ("ok" if value <= target else "MISSED")
        goal = "" if target is None else f"≤ {target:g} {unit}"
        print(f"{label:<40} {value:>8.3g} {unit:<3} {goal:<10} {met}".rstrip())


if __name__ == "__main__":
    main()
