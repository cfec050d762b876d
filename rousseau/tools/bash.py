"""bash: run a shell command in the workspace, with a timeout and no secrets in its environment.

Every command runs under the launcher of `hardening` (Linux), which kills whatever the
command started, `setsid` escapees included, when it ends or times out."""

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
from rousseau.tools import hardening
from rousseau.tools.base import Tool, Workspace
from rousseau.tools.sandbox import Sandbox

MAX_OUTPUT = 64 * 1024
MAX_TIMEOUT = 3600

# Names that carry credentials by convention; their values never reach a tool's shell.
_SECRET_NAME = re.compile(
    r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE_?KEY|ACCESS_?KEY"
    r"|AUTH|COOKIE|WEBHOOK|CONN(ECTION)?_?STR"
    r"|(^|_)(KEYS?|PASS)$|_PWD$|_DSN$"
    r"|(DATABASE|DB|REDIS|MONGO(DB)?|POSTGRES(QL)?|PG|MYSQL|MARIADB|AMQP|RABBITMQ|BROKER"
    r"|CACHE|ELASTICSEARCH)_?UR[LI]$",
    re.IGNORECASE,
)
_SECRET_PREFIXES = ("ROUSSEAU_", "AWS_", "GOOGLE_APPLICATION_CREDENTIALS")
# Values that carry one whatever their name: a URL with a password (or token) before the
# host, a secret in a URL's query, a private key, the shapes of well-known API keys.
_SECRET_VALUE = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/?#@\s]+@"
    r"|[?&](access_?token|token|api_?key|key|secret|password|passwd|pwd|auth|sig(nature)?)="
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\b(sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|glpat-|xox[abposr]-"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,})",
    re.IGNORECASE,
)
MIN_SECRET_INSIDE = 8
"""Configured secrets at least this long are looked for inside values; shorter ones
(which would match innocent text) only as a whole value."""


def scrubbed_environ(
    environ: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
    allow: Iterable[str] = (),
) -> dict[str, str]:
    """The environment minus credentials: by name, by a configured secret anywhere in the
    value, by a value that looks like one. Variables named in `allow` stay whatever they hold."""
    source = os.environ if environ is None else environ
    wanted = set(allow)
    whole = {s for s in secrets if s and len(s) >= 4}
    inside = [s for s in whole if len(s) >= MIN_SECRET_INSIDE]

    def secret(name: str, value: str) -> bool:
        return bool(
            _SECRET_NAME.search(name)
            or name.startswith(_SECRET_PREFIXES)
            or value in whole
            or any(s in value for s in inside)
            or _SECRET_VALUE.search(value)
        )

    return {
        name: value for name, value in source.items() if name in wanted or not secret(name, value)
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
        # The sandbox's pids cgroup, where it can make one, also serves to kill everything.
        limited = None if sandbox is None else await anyio.to_thread.run_sync(sandbox.new_cgroup)
        cgroup = limited
        try:
            if cgroup is None and hardening.SUPPORTED:
                cgroup = await anyio.to_thread.run_sync(hardening.new_cgroup)
            if sandbox is None:
                argv = ["/bin/sh", "-c", input["command"]]
            else:
                argv = await anyio.to_thread.run_sync(
                    sandbox.command, self.workspace.root, input["command"], limited
                )
            return await self._run(hardening.launcher(argv, cgroup), input)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(hardening.remove_cgroup, cgroup)

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
            with anyio.CancelScope(shield=True):
                await _stop(process)
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


async def _stop(process: Process) -> None:
    """End the command and all it started. The launcher is asked first: it also knows what
    left the process group; then the group is killed, whatever happened."""
    if process.returncode is None and hardening.SUPPORTED:
        process.terminate()
        with anyio.move_on_after(hardening.STOP_GRACE):
            await process.wait()
    _kill_group(process)
    await process.wait()


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
