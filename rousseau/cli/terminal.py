"""The local terminal chat: streamed replies, compact tool lines, y/n approval at the keyboard."""

from __future__ import annotations

import queue
import signal
import sys
import threading
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio import CancelScope
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rousseau.agent import (
    Agent,
    ApprovalRequest,
    Message,
    Session,
    StreamEvent,
    StreamEventKind,
    ToolUse,
)
from rousseau.state import SessionStore

HELP = "Commands: /new starts a fresh session, /session shows its id, /exit quits (or Ctrl-D)."


def describe_call(use: ToolUse, width: int = 100) -> str:
    """One line naming the tool and the gist of its input."""
    key = {"bash": "command", "grep": "pattern"}.get(use.name, "path")
    gist = use.input.get(key)
    text = f"{use.name} {gist}" if isinstance(gist, str) else f"{use.name} {use.input_json()}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class Painter:
    """ANSI colour when writing to a terminal, plain text otherwise."""

    enabled: bool

    def dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.enabled else text

    def red(self, text: str) -> str:
        return f"\x1b[31m{text}\x1b[0m" if self.enabled else text

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.enabled else text


@dataclass
class Screen:
    """Where a turn's events are written: the reply to `out`, tool lines to `info`."""

    out: TextIO
    info: TextIO
    paint: Painter
    _open_line: bool = field(default=False)

    def show(self, event: StreamEvent) -> None:
        if event.kind is StreamEventKind.TEXT:
            self.out.write(event.text)
            self.out.flush()
            self._open_line = not event.text.endswith("\n")
        elif event.kind is StreamEventKind.TOOL_CALL and event.tool_use is not None:
            self._line(self.paint.dim(f"  > {describe_call(event.tool_use)}"))
        elif event.kind is StreamEventKind.TOOL_RESULT and event.tool_result is not None:
            result = event.tool_result
            first = (result.content.strip().splitlines() or [""])[0][:100]
            if event.denied:
                self._line(self.paint.red(f"  x {first}"))
            elif result.is_error:
                self._line(self.paint.red(f"  ! {first}"))

    def end(self) -> None:
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False

    def _line(self, text: str) -> None:
        if self._open_line and self.info is self.out:
            self.out.write("\n")
            self._open_line = False
        self.info.write(text + "\n")
        self.info.flush()


class LineReader:
    """Reads lines with input() on a daemon thread, so a pending read never blocks exit.

    input() cannot be taken back: when a read is given up (Ctrl-C at the approval prompt),
    its input() keeps waiting, and the line typed there goes to the next read, which shows
    its own prompt first; nothing typed is lost."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._prompts: queue.Queue[str] = queue.Queue()
        self._lines: MemoryObjectReceiveStream[str | None] | None = None
        self._send: MemoryObjectSendStream[str | None] | None = None
        self._token: Any = None
        self._in_flight = False
        threading.Thread(target=self._serve, name="rousseau-stdin", daemon=True).start()

    async def read(self, prompt: str) -> str | None:
        """The next line, or None at end of input."""
        if self._lines is None:
            self._send, self._lines = anyio.create_memory_object_stream[str | None](16)
            self._token = anyio.lowlevel.current_token()
        if self._in_flight:  # an earlier read's input() is still waiting: its line is ours
            self.out.write(prompt)
            self.out.flush()
        else:
            self._in_flight = True
            self._prompts.put(prompt)
        line = await self._lines.receive()
        self._in_flight = False
        return line

    def _serve(self) -> None:
        while True:
            prompt = self._prompts.get()
            try:
                line: str | None = input(prompt)
            except EOFError:
                line = None
            try:
                assert self._send is not None
                anyio.from_thread.run_sync(self._send.send_nowait, line, token=self._token)
            except Exception:  # the loop is gone: nobody is left to read it
                pass


class TerminalApproval:
    """Asks the person at the keyboard to allow a tool call the rules did not settle."""

    def __init__(self, reader: LineReader, screen: Screen) -> None:
        self.reader = reader
        self.screen = screen

    async def __call__(self, request: ApprovalRequest) -> bool:
        from rousseau.approvals import SPLITTERS, preview, visible

        self.screen.end()
        what = describe_call(request.tool_use, width=200)
        raw = request.tool_use.input_json()
        if what.endswith("…") or visible(raw, len(raw), 0) != raw or "\\n" in raw:
            # Cut short, or hiding something (control characters, long blank runs, several
            # lines): show all of it as the owners in chat see it, its end always in sight.
            shown = preview(request.tool_use.name, request.tool_use.input, SPLITTERS)
            for line in shown.splitlines():
                self.screen.info.write(f"  {line}\n")
            self.screen.info.flush()
            what = request.tool_use.name
        answer = await self.reader.read(self.screen.paint.bold(f"  allow {what}? [y/N] "))
        return (answer or "").strip().lower() in ("y", "yes")


async def run_turn(agent: Agent, session: Session, text: str, screen: Screen) -> None:
    await agent.append(session, Message.user(text))
    try:
        async with aclosing(agent.turn_stream(session)) as events:
            async for event in events:
                screen.show(event)
    finally:
        screen.end()


@dataclass
class _Current:
    turn: CancelScope | None = None


async def interactive(
    agent: Agent,
    store: SessionStore,
    session: Session,
    screen: Screen,
    reader: LineReader,
    banner: str,
) -> None:
    """The chat loop: Ctrl-C stops a reply in progress, and quits at the prompt."""
    screen.info.write(banner + "\n")
    current = _Current()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_interrupts, current, tg.cancel_scope, screen)
        while True:
            line = await reader.read(screen.paint.bold("you> "))
            if line is None:
                screen.info.write("\n")
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                break
            if text == "/help":
                screen.info.write(HELP + "\n")
                continue
            if text == "/session":
                screen.info.write(f"session {session.id}\n")
                continue
            if text in ("/new", "/reset"):
                session = await store.create_session()
                screen.info.write(f"new session {session.id}\n")
                continue
            with anyio.CancelScope() as scope:
                current.turn = scope
                try:
                    await run_turn(agent, session, text, screen)
                except Exception as exc:
                    screen.info.write(screen.paint.red(f"error: {exc}") + "\n")
            current.turn = None
            if scope.cancelled_caught:
                screen.info.write(screen.paint.dim("(stopped)") + "\n")
        tg.cancel_scope.cancel()


async def _watch_interrupts(current: _Current, everything: CancelScope, screen: Screen) -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if current.turn is not None:
                current.turn.cancel()
            else:
                screen.info.write("\n")
                everything.cancel()
                return


def default_screen(*, interactive: bool) -> Screen:
    """Interactive: everything on stdout. One-shot: the reply on stdout, tool lines on stderr."""
    if interactive:
        return Screen(out=sys.stdout, info=sys.stdout, paint=Painter(sys.stdout.isatty()))
    return Screen(out=sys.stdout, info=sys.stderr, paint=Painter(sys.stderr.isatty()))
