"""The loop each daemon of a cluster runs for every transport that allows a single
connection: the election of the one daemon that runs it. (What a dead daemon left unanswered
is pulled by the routers of the others, see SharedState.pull.)

It knows a transport by its name, and what runs it by the coroutine function it is given:
the state never imports a transport.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from rousseau.state.postgres_daemon import PostgresDaemonState

__all__ = ["elected"]


async def elected(
    cluster: PostgresDaemonState,
    transport: str,
    run: Callable[[], Coroutine[Any, Any, None]],
    *,
    stop: Callable[[], Coroutine[Any, Any, None]],
    stopping: Callable[[], bool],
) -> None:
    """Where daemons share the state, a transport that allows one connection only (long
    polling, a sync loop, a linked device) runs on the daemon elected for it, and that daemon
    sends its replies; the others wait to take over. `run` serves the transport and its
    replies until cancelled; `stop` stops it after the election is lost; `stopping` says
    whether the daemon is stopping (then no new election is sought)."""
    while not stopping():
        async with cluster.polling(transport) as poller:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await poller.lost()
                tg.cancel_scope.cancel()
        await stop()
