"""The agent loop's own cost per iteration, and `rousseau --help` start-up time.

The provider answers instantly, so what is measured is the loop: building requests, checking
and running a trivial tool through the approver, and persisting every message to SQLite.
Targets: under 0.3 ms per iteration; under 300 ms start-up.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio

from rousseau.agent import Agent, AllowAllApprover, Message, Options, Session, ToolCall, ToolOutput
from rousseau.agent.testing import ScriptedProvider, tool_reply
from rousseau.log import configure_logging
from rousseau.state import Store
from rousseau.tools import Registry, Tool

ITERATIONS = 30  # per turn: 29 tool round trips and a final answer
TURNS = 100


class Noop(Tool):
    name = "noop"
    description = "Does nothing."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        return ToolOutput(content="ok")


async def loop_cost(store: Store | None) -> list[float]:
    per_iteration = []
    registry = Registry([Noop()])
    for turn in range(TURNS):
        script = [tool_reply("noop", n=i) for i in range(ITERATIONS - 1)] + ["done"]
        provider = ScriptedProvider(*script, chunk=1 << 20)
        agent = Agent(
            provider,
            registry,
            Options(approver=AllowAllApprover(), max_iterations=ITERATIONS, history=store),
        )
        session = Session(id=f"bench-{turn}", messages=[Message.user("go")])
        started = time.perf_counter()
        await agent.turn(session)
        per_iteration.append((time.perf_counter() - started) / ITERATIONS)
    return per_iteration


def startup_ms(runs: int = 10) -> list[float]:
    script = Path(sys.executable).parent / "rousseau"
    command = (
        [str(script), "--help"] if script.exists() else [sys.executable, "-m", "rousseau", "--help"]
    )
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main() -> None:
    # Only warnings: what is measured is the loop, not a terminal scrolling log lines.
    configure_logging("warning")
    memory = await loop_cost(None)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
        persisted = await loop_cost(store)
        store.close()
    print(f"agent loop, {TURNS} turns x {ITERATIONS} iterations, zero-latency provider")
    for label, values in (("in memory", memory), ("persisting to SQLite", persisted)):
        ms = [v * 1000 for v in values]
        print(
            f"  {label:<22} median {statistics.median(ms):.3f} ms/iteration"
            f"  p95 {statistics.quantiles(ms, n=20)[18]:.3f}  (target < 0.3 ms)"
        )
    starts = startup_ms()
    print(
        f"rousseau --help start-up: median {statistics.median(starts):.0f} ms,"
        f" max {max(starts):.0f} ms over {len(starts)} runs (target < 300 ms)"
    )


if __name__ == "__main__":
    anyio.run(main)
