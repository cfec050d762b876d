"""What the daemon's process does for its host and its own latency: systemd's notify
protocol and watchdog, and a garbage collector kept out of the event loop's way once start-up
is over."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
from collections.abc import Callable, Iterator

import anyio
import structlog
from anyio.abc import TaskGroup

__all__ = ["FULL_COLLECTION_EVERY", "sd_notify", "startup_objects_frozen", "watchdog"]

log = structlog.get_logger("rousseau.daemon")

FULL_COLLECTION_EVERY = 100
"""Collections of the garbage collector's middle generation between two full ones (see
startup_objects_frozen)."""


def sd_notify(state: str) -> bool:
    """Tell systemd about our state (READY=1, STOPPING=1, WATCHDOG=1) if it is listening."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
        return True
    except OSError as exc:
        log.warning("daemon.notify_failed", error=str(exc))
        return False


def watchdog(tg: TaskGroup) -> None:
    """Where systemd watches the daemon (WATCHDOG_USEC), ping it twice per period in `tg`."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec or not usec.isdigit():
        return

    async def ping() -> None:
        while True:
            sd_notify("WATCHDOG=1")
            await anyio.sleep(int(usec) / 2e6)

    tg.start_soon(ping)


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[Callable[[], None]]:
    """No garbage collection while the daemon starts; the call it yields freezes what start-up
    made (some 80,000 long-lived objects: config, SDK modules, the registry) out of the
    collector's reach. A full collection walking them held the event loop 50-110 ms under
    load; frozen, collections only walk what the messages create.

    Those still include the sessions held in memory (three objects a message, tens of
    thousands under load), which a full collection walks to find nothing to free: 20-40 ms
    of held loop, the tail of reply latency at 100 messages a second. So full collections
    come after FULL_COLLECTION_EVERY collections of the middle generation instead of
    Python's 10; young garbage is collected as before. Left as found on exit."""
    if not gc.isenabled():  # the caller manages collection (or another daemon starts)
        yield lambda: None
        return
    thresholds = gc.get_threshold()

    def started() -> None:
        gc.freeze()
        gc.set_threshold(thresholds[0], thresholds[1], FULL_COLLECTION_EVERY)
        gc.enable()

    gc.disable()
    try:
        yield started
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
        gc.unfreeze()
