"""Signal through signal-cli's JSON-RPC mode: `signal-cli -a ACCOUNT jsonRpc` as a subprocess.

signal-cli is the only well-kept Signal client a bot can drive; its JSON-RPC (one JSON object
per line on stdin/stdout) is small enough to speak directly. When the process exits the
transport fails and the supervisor restarts it with backoff.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Sequence
from typing import Any

import anyio
import structlog
from anyio.abc import Process, TaskStatus

from rousseau.agent import TransportAuthError, TransportError
from rousseau.transports.base import Inbound, InboundHandler, KeyValue, Outbound

log = structlog.get_logger("rousseau.signal")

MAX_LENGTH = 2000
GROUP_PREFIX = "group:"
_MENTION_MARK = "\ufffc"  # where signal puts a mention in the text
_REQUEST_TIMEOUT = 30.0
_UNREGISTERED = ("is not registered", "authorization failed")
"""What signal-cli says when its account was never registered or linked, or was dropped."""


class SignalError(TransportError):
    """signal-cli could not be run, exited, or answered a request with an error."""


class SignalTransport:
    name = "signal"
    max_length = MAX_LENGTH
    measure = staticmethod(len)

    def __init__(
        self, account: str, *, binary: str = "signal-cli", extra_args: Sequence[str] = ()
    ) -> None:
        self.account = account
        self.binary = binary
        self.extra_args = list(extra_args)
        self._process: Process | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._write_lock = anyio.Lock()
        self._stop = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def bind_state(self, state: KeyValue) -> None:
        """signal-cli keeps the account's state in its own data folder."""

    async def run(
        self, handler: InboundHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop = anyio.Event()
        args = [self.binary, "-a", self.account, *self.extra_args, "jsonRpc"]
        try:
            process = await anyio.open_process(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise SignalError(f"signal: cannot run {self.binary!r} ({exc.strerror})") from exc
        self._process = process
        errors: list[str] = []
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_stderr, process, errors)
                tg.start_soon(self._read, process, handler, tg.cancel_scope)
                log.info("signal.connected", account=self.account)
                task_status.started()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._process = None
            for event, _ in self._pending.values():
                event.set()
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.terminate()
                    with anyio.move_on_after(5):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                await process.aclose()
        if not self._stop.is_set():
            detail = errors[-1] if errors else "no message"
            if any(mark in line.lower() for line in errors for mark in _UNREGISTERED):
                raise TransportAuthError(
                    f"signal.account: signal-cli cannot use {self.account} ({detail}); register "
                    "or link it with signal-cli first"
                )
            raise SignalError(f"signal: signal-cli exited (code {process.returncode}): {detail}")

    async def _read(self, process: Process, handler: InboundHandler, scope: Any) -> None:
        assert process.stdout is not None
        buffer = b""
        async for chunk in process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    await self._on_line(line, handler)
        scope.cancel()  # stdout closed: the process is gone

    async def _read_stderr(self, process: Process, errors: list[str]) -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            for line in chunk.decode("utf-8", errors="replace").splitlines():
                if line.strip():
                    errors.append(line.strip())
                    del errors[:-20]

    async def _on_line(self, line: bytes, handler: InboundHandler) -> None:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            log.warning("signal.bad_output", line=line[:200].decode("utf-8", errors="replace"))
            return
        if "id" in message and ("result" in message or "error" in message):
            waiting = self._pending.get(str(message["id"]))
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        if message.get("method") == "receive":
            params = message.get("params") or {}
            inbound = self._normalise(params.get("envelope") or {})
            if inbound is not None:
                await handler(inbound)

    def _normalise(self, envelope: dict[str, Any]) -> Inbound | None:
        data = envelope.get("dataMessage")
        source = (
            envelope.get("sourceNumber") or envelope.get("source") or envelope.get("sourceUuid")
        )
        if not data or not source or source == self.account:
            return None  # receipts, typing, sync copies of our own messages
        text = data.get("message") or ""
        if not text:
            return None
        group = (data.get("groupInfo") or {}).get("groupId")
        mentions = data.get("mentions") or []
        mentioned = any(m.get("number") == self.account for m in mentions)
        text = text.replace(_MENTION_MARK, "").strip()
        timestamp = int(envelope.get("timestamp") or data.get("timestamp") or 0)
        return Inbound(
            transport=self.name,
            chat_id=f"{GROUP_PREFIX}{group}" if group else str(source),
            sender_id=str(source),
            message_id=f"{source}:{timestamp}",
            text=text,
            is_group=group is not None,
            mentioned=mentioned,
            sender_name=str(envelope.get("sourceName") or ""),
            at=timestamp / 1000,
        )

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """One JSON-RPC call; raises SignalError on an error reply or a dead process."""
        process = self._process
        if process is None or process.stdin is None:
            raise SignalError("signal: signal-cli is not running")
        request_id = str(next(self._ids))
        waiting: tuple[anyio.Event, list[dict[str, Any]]] = (anyio.Event(), [])
        self._pending[request_id] = waiting
        payload = {"jsonrpc": "2.0", "method": method, "params": params, "id": request_id}
        try:
            async with self._write_lock:
                await process.stdin.send((json.dumps(payload) + "\n").encode())
            with anyio.fail_after(_REQUEST_TIMEOUT):
                await waiting[0].wait()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError) as exc:
            raise SignalError(f"signal: {method} got no answer ({type(exc).__name__})") from exc
        finally:
            self._pending.pop(request_id, None)
        if not waiting[1]:
            raise SignalError(f"signal: signal-cli stopped before answering {method}")
        reply = waiting[1][0]
        if "error" in reply:
            raise SignalError(f"signal: {method} failed: {reply['error'].get('message')}")
        return reply.get("result")

    @staticmethod
    def _target(chat_id: str) -> dict[str, Any]:
        if chat_id.startswith(GROUP_PREFIX):
            return {"groupId": chat_id.removeprefix(GROUP_PREFIX)}
        return {"recipient": [chat_id]}

    async def send(self, message: Outbound) -> None:
        await self.request("send", {**self._target(message.chat_id), "message": message.text})

    async def typing(self, chat_id: str, thread_id: str | None) -> None:
        await self.request("sendTyping", self._target(chat_id))

    async def stop(self) -> None:
        self._stop.set()

    async def check(self) -> str:
        """Runs `signal-cli --version` (a harmless call that proves the binary works)."""
        try:
            result = await anyio.run_process([self.binary, "--version"], check=False)
        except OSError as exc:
            raise SignalError(f"signal: cannot run {self.binary!r} ({exc.strerror})") from exc
        if result.returncode != 0:
            raise SignalError(f"signal: {self.binary} --version failed")
        return result.stdout.decode().strip() or self.binary

    async def aclose(self) -> None:
        """The signal-cli process ends with `run`; nothing else is held."""
