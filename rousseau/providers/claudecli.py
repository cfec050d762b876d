"""The Claude Code CLI as a provider: print mode, JSON output, one CLI session per rousseau session.

The CLI runs its own tools under its own permission mode, so rousseau's registry and approver
do not apply to it. Only the newest user turn is sent; the CLI keeps the history itself.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import Process

from rousseau.agent import (
    Message,
    ProviderError,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    Usage,
)

log = structlog.get_logger("rousseau.providers")

_NAMESPACE = uuid.UUID("8f9d4a52-5a7e-4d0c-9c57-6f2b1f0e6a11")
_IN_USE = "already in use"
_MAX_STDERR = 16 * 1024


class ExternalSessions(Protocol):
    """Remembers which CLI session belongs to which rousseau session (the store does this)."""

    async def get_external_session(self, session_id: str, provider: str) -> str | None: ...

    async def set_external_session(self, session_id: str, provider: str, external: str) -> None: ...


class _MemorySessions:
    """A bounded in-memory stand-in when no store is given."""

    def __init__(self, limit: int = 10_000) -> None:
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    async def get_external_session(self, session_id: str, provider: str) -> str | None:
        return self._ids.get(session_id)

    async def set_external_session(self, session_id: str, provider: str, external: str) -> None:
        self._ids[session_id] = external
        self._ids.move_to_end(session_id)
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)


class ClaudeCLIProvider:
    name = "claudecli"

    def __init__(
        self,
        *,
        binary: str = "claude",
        model: str = "",
        permission_mode: str = "default",
        extra_args: Sequence[str] = (),
        workspace: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        sessions: ExternalSessions | None = None,
    ) -> None:
        self.binary = binary
        self.model = model
        self.permission_mode = permission_mode
        self.extra_args = list(extra_args)
        self.workspace = str(Path(workspace).expanduser()) if workspace else None
        self.env = dict(env) if env is not None else None
        self.sessions: ExternalSessions = sessions or _MemorySessions()
        log.warning(
            "claudecli.own_tools",
            detail="the Claude CLI runs its own tools; rousseau's tool registry and approver "
            "do not apply",
            permission_mode=permission_mode,
        )

    async def check(self) -> None:
        """Prove the binary runs (`claude --version`)."""
        try:
            result = await anyio.run_process(
                [self.binary, "--version"], env=self.env, check=False, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise ProviderError(
                self.name,
                f"cannot run {self.binary!r}: {exc.strerror}",
                hint="check claudecli.binary",
            ) from None
        if result.returncode != 0:
            detail = result.stderr.decode("utf-8", errors="replace").strip() or "it failed"
            raise ProviderError(self.name, f"{self.binary} --version: {detail.splitlines()[-1]}")

    async def complete(self, request: Request) -> Response:
        response: Response | None = None
        async for event in self._run(request, stream=False):
            if event.response is not None:
                response = event.response
        assert response is not None
        return response

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        async for event in self._run(request, stream=True):
            yield event

    async def _run(self, request: Request, *, stream: bool) -> AsyncGenerator[StreamEvent, None]:
        prompt = _newest_user_turn(request.messages)
        known = await self.sessions.get_external_session(request.session_id, self.name)
        cli_id = known or str(uuid.uuid5(_NAMESPACE, request.session_id))
        resume = known is not None
        for attempt in range(2):
            args = self._args(request, cli_id, resume=resume, stream=stream)
            run = _Run(args, prompt, self.workspace, self.env)
            try:
                async for event in run.events(stream):
                    yield event
            except _SessionInUse:
                if attempt == 0 and not resume:
                    resume = True  # a previous run created it; carry on in it
                    continue
                raise ProviderError(self.name, f"session {cli_id} is already in use") from None
            if not resume or known is None:
                await self.sessions.set_external_session(request.session_id, self.name, cli_id)
            return

    def _args(self, request: Request, cli_id: str, *, resume: bool, stream: bool) -> list[str]:
        args = [self.binary, "-p"]
        if stream:
            args += ["--output-format", "stream-json", "--verbose", "--include-partial-messages"]
        else:
            args += ["--output-format", "json"]
        args += ["--resume", cli_id] if resume else ["--session-id", cli_id]
        if self.model:
            args += ["--model", self.model]
        if self.permission_mode:
            args += ["--permission-mode", self.permission_mode]
        if request.system:
            args += ["--append-system-prompt", request.system]
        return args + self.extra_args


class _SessionInUse(Exception):
    pass


class _Run:
    """One CLI process: prompt on stdin, JSON (or JSON lines) on stdout."""

    def __init__(
        self, args: list[str], prompt: str, cwd: str | None, env: Mapping[str, str] | None
    ) -> None:
        self.args = args
        self.prompt = prompt
        self.cwd = cwd
        self.env = env
        self.stderr = bytearray()

    async def events(self, stream: bool) -> AsyncGenerator[StreamEvent, None]:
        try:
            process = await anyio.open_process(
                self.args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
            )
        except OSError as exc:
            raise ProviderError(
                "claudecli",
                f"cannot run {self.args[0]!r}: {exc.strerror}",
                hint="check claudecli.binary",
            ) from None
        result: dict[str, Any] | None = None
        streamed = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._feed, process)
                tg.start_soon(self._collect_stderr, process)
                async for item in _json_lines(process):
                    kind = item.get("type")
                    if kind == "result":
                        result = item
                    elif stream and kind == "stream_event":
                        text = _delta_text(item.get("event") or {})
                        if text:
                            streamed = True
                            yield StreamEvent.text_delta(text)
                    elif stream and kind == "assistant" and not streamed:
                        text = _message_text(item.get("message") or {})
                        if text:
                            yield StreamEvent.text_delta(text)
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()
        yield StreamEvent.final(self._response(result, process.returncode))

    def _response(self, result: dict[str, Any] | None, code: int | None) -> Response:
        errors = self.stderr.decode("utf-8", errors="replace").strip()
        if _IN_USE in errors:
            raise _SessionInUse()
        if result is None:
            detail = errors.splitlines()[-1] if errors else f"exit code {code}, no result"
            raise ProviderError("claudecli", detail, hint="run the claude CLI by hand to see why")
        if result.get("is_error") or result.get("subtype") not in (None, "success"):
            text = str(result.get("result") or result.get("subtype") or "the CLI reported an error")
            if _IN_USE in text:
                raise _SessionInUse()
            raise ProviderError("claudecli", text.splitlines()[0] if text else "error")
        u = result.get("usage") or {}
        usage = Usage(
            input_tokens=int(u.get("input_tokens") or 0),
            output_tokens=int(u.get("output_tokens") or 0),
            cache_read_tokens=int(u.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(u.get("cache_creation_input_tokens") or 0),
        )
        return Response(
            message=Message.assistant(str(result.get("result") or "")),
            stop_reason=StopReason.END_TURN,
            usage=usage,
        )

    async def _feed(self, process: Process) -> None:
        assert process.stdin is not None
        async with process.stdin:
            await process.stdin.send(self.prompt.encode("utf-8"))

    async def _collect_stderr(self, process: Process) -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            if len(self.stderr) < _MAX_STDERR:
                self.stderr += chunk[: _MAX_STDERR - len(self.stderr)]


async def _json_lines(process: Process) -> AsyncIterator[dict[str, Any]]:
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            item = _parse(line)
            if item is not None:
                yield item
    item = _parse(buffer)
    if item is not None:
        yield item


def _parse(line: bytes) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        log.warning("claudecli.bad_output", line=line[:200].decode("utf-8", errors="replace"))
        return None
    return value if isinstance(value, dict) else None


def _delta_text(event: dict[str, Any]) -> str:
    delta = event.get("delta") or {}
    if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
        return str(delta.get("text") or "")
    return ""


def _message_text(message: dict[str, Any]) -> str:
    return "".join(
        str(block.get("text") or "")
        for block in message.get("content") or []
        if isinstance(block, dict) and block.get("type") == "text"
    )


def _newest_user_turn(messages: list[Message]) -> str:
    """The text of the newest user message; its files as their stand-ins, which name where
    each was saved in the workspace (the CLI reads them from there with its own tools)."""
    for message in reversed(messages):
        if message.role is not Role.USER:
            continue
        parts = [message.text] if message.text else []
        parts += [a.stand_in() for a in message.attachments]
        if parts:
            return "\n".join(parts)
    raise ProviderError("claudecli", "there is no user message to send")
