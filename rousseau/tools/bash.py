"""bash: run a shell command in the workspace, with a timeout and no secrets in its environment."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import anyio
from anyio.abc import Process

from rousseau.agent import ToolCall, ToolOutput
from rousseau.tools.base import Tool, Workspace
from rousseau.tools.sandbox import Sandbox

MAX_OUTPUT = 64 * 1024
MAX_TIMEOUT = 3600

# Names that carry credentials by convention; their values never reach a tool's shell.
_SECRET_NAME = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY|AUTH)",
    re.IGNORECASE,
)
_SECRET_PREFIXES = ("ROUSSEAU_", "AWS_", "GOOGLE_APPLICATION_CREDENTIALS")


def scrubbed_environ(
    environ: Mapping[str, str] | None = None, secrets: Iterable[str] = ()
) -> dict[str, str]:
    """The environment minus credentials: by name, and by value for configured secrets."""
    source = os.environ if environ is None else environ
    values = {s for s in secrets if s and len(s) >= 4}
    return {
        name: value
        for name, value in source.items()
        if not _SECRET_NAME.search(name)
        and not name.startswith(_SECRET_PREFIXES)
        and value not in values
    }


class BashTool(Tool):
    """`bash {command, timeout?}`: a shell command in the workspace, killed at the timeout,
    without secrets in its environment, optionally in a Sandbox."""

    name = "bash"
    description = (
        "Run a command with /bin/sh -c in the workspace folder. stdout and stderr are "
        "combined; long output keeps its head and tail. The command and everything it "
        "started are killed at the timeout (seconds)."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "Shell command"},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT,
                "description": "Seconds before the command is killed",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        workspace: Workspace,
        *,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        max_output: int = MAX_OUTPUT,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.timeout = timeout
        self.env = dict(env) if env is not None else scrubbed_environ()
        self.max_output = max_output
        self.sandbox = sandbox

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        sandbox = self.sandbox
        if sandbox is None:
            return await self._run(["/bin/sh", "-c", input["command"]], input)
        cgroup = await anyio.to_thread.run_sync(sandbox.new_cgroup)
        try:
            argv = await anyio.to_thread.run_sync(
                sandbox.command, self.workspace.root, input["command"], cgroup
            )
            return await self._run(argv, input)
        finally:
            await anyio.to_thread.run_sync(sandbox.remove_cgroup, cgroup)

    async def _run(self, argv: list[str], input: dict[str, Any]) -> ToolOutput:
        timeout = float(input.get("timeout") or self.timeout)
        output = _CappedOutput(self.max_output)
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.workspace.root,
            env=self.env,
            start_new_session=True,
        )
        timed_out = False
        try:
            with anyio.move_on_after(timeout) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_drain, process, output)
                    await process.wait()
                    # The shell is done; whatever it left running in its group goes too.
                    _kill_group(process)
            timed_out = scope.cancelled_caught
        finally:
            _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()
        text = output.text()
        if timed_out:
            note = f"[killed: timed out after {timeout:g} s]"
            return ToolOutput(content=f"{text}\n{note}" if text else note, is_error=True)
        code = process.returncode
        if code:
            note = f"[exit code {code}]"
            return ToolOutput(content=f"{text}\n{note}" if text else note, is_error=True)
        return ToolOutput(content=text or "(no output)")


async def _drain(process: Process, output: _CappedOutput) -> None:
    assert process.stdout is not None
    try:
        async for chunk in process.stdout:
            output.add(chunk)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


def _kill_group(process: Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _CappedOutput:
    """Keeps the first and last halves of the output; the middle is counted, not kept."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size > self.half:
            first = self.tail[0]
            excess = self.tail_size - self.half
            if len(first) <= excess:
                self.tail.popleft()
                self.tail_size -= len(first)
                self.dropped += len(first)
            else:
                self.tail[0] = first[excess:]
                self.tail_size -= excess
                self.dropped += excess

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = b"".join(self.tail).decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail}".rstrip()
        return (head + tail).rstrip()
