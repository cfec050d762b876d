"""A program on a pseudo-terminal of its own, as a person runs `rousseau init`."""

from __future__ import annotations

import os
import select
import subprocess
import time


class Terminal:
    """A program on a pseudo-terminal of its own: what it printed, and typing into it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        # A session of its own: no controlling terminal, so getpass turns off echo on the
        # pseudo-terminal itself, never on the terminal running the tests.
        self.proc = subprocess.Popen(
            argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.output = ""
        self._read_to = 0
        self._closed = False
        """The program's side is closed (it ended)."""
        self._master_closed = False

    def expect(self, text: str, timeout: float = 30) -> None:
        """Wait until `text` is printed (after what the last expect matched)."""
        deadline = time.monotonic() + timeout
        while text not in self.output[self._read_to :]:
            if self._closed or not self._read(deadline - time.monotonic()):
                self.kill()  # a failed test leaves no program running into the next one
                raise AssertionError(f"{text!r} never came; the terminal shows:\n{self.output}")
        self._read_to = self.output.index(text, self._read_to) + len(text)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def end_of_input(self) -> None:
        os.write(self.master, b"\x04")  # Ctrl-D at the start of a line

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while not self._closed and self._read(deadline - time.monotonic()):
            pass
        code = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if not self._master_closed:
            self._master_closed = True
            os.close(self.master)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if not self._master_closed:
            self._master_closed = True
            os.close(self.master)

    def _read(self, timeout: float) -> bool:
        if timeout <= 0 or not select.select([self.master], [], [], timeout)[0]:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the program ended and its side is closed
            data = b""
        if not data:
            self._closed = True
            return False
        self.output += data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        return True
