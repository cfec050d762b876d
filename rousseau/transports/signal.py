"""Signal through signal-cli's JSON-RPC mode: `signal-cli -a ACCOUNT jsonRpc` as a subprocess.

signal-cli is the only well-kept Signal client a bot can drive; its JSON-RPC (one JSON object
per line on stdin/stdout) is small enough to speak directly. When the process exits the
transport fails and the supervisor restarts it with backoff.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import json
import os
import subprocess
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import Process, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rousseau.agent import TransportAuthError, TransportError
from rousseau.media import Download, Incoming, MediaIntake, media_type_of
from rousseau.messages import Inbound, InboundHandler, KeyValue, Outbound
from rousseau.transports.base import file_bytes, take_files
from rousseau.transports.unreadable import (
    Unreadable,
    checked,
    ident,
    integer_id,
    number,
    refuse,
    text,
)

log = structlog.get_logger("rousseau.signal")

MAX_LENGTH = 2000
GROUP_PREFIX = "group:"
_MENTION_MARK = "\ufffc"  # where signal puts a mention in the text
_REQUEST_TIMEOUT = 30.0
_DRAIN_TIMEOUT = 10.0
"""Seconds a stopping transport waits for what signal-cli printed to be handed over."""
_IN_HAND = 64
"""Received messages held at once, not yet stored: past it, signal-cli's output waits."""
MAX_FILE_BYTES = 100_000_000
"""Signal's limit on one attachment."""
_UNREGISTERED = ("is not registered", "authorization failed")
"""What signal-cli says when its account was never registered or linked, or was dropped."""


class SignalError(TransportError):
    """signal-cli could not be run, exited, or answered a request with an error."""


class SignalTransport:
    name = "signal"
    max_length = MAX_LENGTH
    max_file_bytes = MAX_FILE_BYTES
    measure = staticmethod(len)

    def __init__(
        self, account: str, *, binary: str = "signal-cli", extra_args: Sequence[str] = ()
    ) -> None:
        self.account = account
        self.binary = binary
        self.extra_args = list(extra_args)
        self.attachments = _data_dir(self.extra_args) / "attachments"
        """Where signal-cli saves what it receives, each file named by its attachment id."""
        self.media: MediaIntake | None = None
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

    def bind_media(self, media: MediaIntake) -> None:
        """Take attachments in (unbound, only the text)."""
        self.media = media

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
                # Received messages are handed over by a task of their own, in order, so
                # taking their files in never holds up the answers to requests.
                inbox, received = anyio.create_memory_object_stream[dict[str, Any]](64)
                tg.start_soon(self._read, process, inbox)
                tg.start_soon(self._hand_over, received, handler, tg.cancel_scope)
                log.info("signal.connected", account=self.account)
                task_status.started()
                await self._stop.wait()
                # What signal-cli printed before it ends is still handed over (it counts
                # as received), then the hand-over ends the task group.
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                await anyio.sleep(_DRAIN_TIMEOUT)
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

    async def _read(self, process: Process, inbox: MemoryObjectSendStream[dict[str, Any]]) -> None:
        assert process.stdout is not None
        buffer = b""
        async with inbox:  # closed when stdout is: the process is gone
            async for chunk in process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        await self._on_line(line, inbox)

    async def _read_stderr(self, process: Process, errors: list[str]) -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            for line in chunk.decode("utf-8", errors="replace").splitlines():
                if line.strip():
                    errors.append(line.strip())
                    del errors[:-20]

    async def _on_line(self, line: bytes, inbox: MemoryObjectSendStream[dict[str, Any]]) -> None:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            log.warning("signal.bad_output", line=line[:200].decode("utf-8", errors="replace"))
            return
        if not isinstance(message, dict):
            refuse(self, f"a line of {type(message).__name__}, not an object")
            return
        if "id" in message and ("result" in message or "error" in message):
            waiting = self._pending.get(str(message["id"]))
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        if message.get("method") == "receive":
            await inbox.send(message.get("params") or {})

    async def _hand_over(
        self,
        received: MemoryObjectReceiveStream[dict[str, Any]],
        handler: InboundHandler,
        scope: anyio.CancelScope,
    ) -> None:
        """Each received message, its files taken in, to the handler: each chat's in order,
        the chats side by side, so a burst is stored together and a slow chat holds up no
        other. Once signal-cli has exited and all it printed was handed over, the
        transport's run ends."""
        lanes: dict[str, deque[tuple[Inbound, list[Incoming]]]] = {}
        in_hand = anyio.Semaphore(_IN_HAND)

        async def lane(chat: str, queue: deque[tuple[Inbound, list[Incoming]]]) -> None:
            try:
                while queue:
                    inbound, files = queue[0]
                    inbound = await take_files(
                        inbound, self.media, files, unavailable=(FileNotFoundError,)
                    )
                    await handler(inbound)
                    queue.popleft()
                    in_hand.release()
            finally:
                del lanes[chat]

        async with received, anyio.create_task_group() as tg:
            async for params in received:
                found = self._received(params)
                if found is None:
                    continue
                await in_hand.acquire()
                chat = found[0].chat_id
                queue = lanes.get(chat)
                if queue is None:
                    queue = lanes[chat] = deque()
                    tg.start_soon(lane, chat, queue)
                queue.append(found)
        scope.cancel()

    def _received(self, params: Any) -> tuple[Inbound, list[Incoming]] | None:
        """A received message as the router takes it, checked, with its files; None for
        what is not one to answer, or what cannot be read (recorded as failed). Never
        raises: that would end the transport, and signal-cli would not print it again."""
        try:
            envelope = params.get("envelope") if isinstance(params, dict) else None
            found = self._normalise(envelope or {})
            return None if found is None else (checked(found[0]), found[1])
        except Exception as exc:
            refuse(self, exc)
            return None

    def _normalise(self, envelope: dict[str, Any]) -> tuple[Inbound, list[Incoming]] | None:
        data = envelope.get("dataMessage")
        source = (
            envelope.get("sourceNumber") or envelope.get("source") or envelope.get("sourceUuid")
        )
        if not data or not source or source == self.account:
            return None  # receipts, typing, sync copies of our own messages
        source = ident(source, "source")
        said = text(data.get("message"), "message")
        files = [self._incoming(a) for a in _listed(data, "attachments") if _plain_id(a)]
        if not said and not (files and self.media is not None):
            return None
        group = (data.get("groupInfo") or {}).get("groupId")
        mentioned = any(
            isinstance(m, dict) and m.get("number") == self.account
            for m in _listed(data, "mentions")
        )
        said = said.replace(_MENTION_MARK, "").strip()
        timestamp = integer_id(envelope.get("timestamp") or data.get("timestamp") or 0, "timestamp")
        inbound = Inbound(
            transport=self.name,
            chat_id=f"{GROUP_PREFIX}{ident(group, 'groupId')}" if group else source,
            sender_id=source,
            message_id=f"{source}:{timestamp}",
            text=said,
            is_group=group is not None,
            mentioned=mentioned,
            sender_name=text(envelope.get("sourceName"), "sourceName"),
            at=int(timestamp) / 1000,
        )
        return inbound, files

    def _incoming(self, attachment: dict[str, Any]) -> Incoming:
        """A received attachment, read from the file signal-cli saved it in. Signal marks no
        voice notes in what signal-cli prints: any audio is taken as one."""
        media_type = media_type_of(text(attachment.get("contentType"), "contentType"))
        size = attachment.get("size")
        if size is not None:
            size = int(number(size, "size"))
        return Incoming(
            name=text(attachment.get("filename"), "filename") or attachment["id"],
            media_type=media_type,
            size=size,
            fetch=functools.partial(_saved, self.attachments / attachment["id"]),
            voice=media_type.startswith("audio/"),
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
        params: dict[str, Any] = {**self._target(message.chat_id), "message": message.text}
        if message.attachment is not None:
            data = await file_bytes(self.media, message)
            if isinstance(data, Outbound):
                params["message"] = data.text
            else:  # a data URI with the file's name (RFC 2397, as signal-cli takes them)
                a = message.attachment
                encoded = base64.b64encode(data).decode()
                name = (a.name or "file").replace(";", "_").replace(",", "_")
                params["attachments"] = [f"data:{a.media_type};filename={name};base64,{encoded}"]
                if a.voice:  # a voice note, played in place (signal-cli 0.14.2 and later)
                    params["voiceNote"] = True
        await self.request("send", params)

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


def _data_dir(args: Sequence[str]) -> Path:
    """signal-cli's data folder: `--config DIR` among its arguments, else its default."""
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            return Path(args[i + 1]).expanduser()
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "signal-cli"


def _listed(data: dict[str, Any], key: str) -> list[Any]:
    """A list a message carries (attachments, mentions): none when absent."""
    found = data.get(key) or []
    if not isinstance(found, list):
        raise Unreadable(f"{key} is {type(found).__name__}, not a list")
    return found


def _plain_id(attachment: Any) -> bool:
    """An attachment signal-cli saved under a plain file name (never a path elsewhere)."""
    name = attachment.get("id") if isinstance(attachment, dict) else None
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


async def _saved(path: Path, into: Download) -> None:
    """An attachment signal-cli saved, copied a chunk at a time up to the limit."""
    await into.copy_file(path)
