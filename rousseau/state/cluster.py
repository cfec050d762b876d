"""The loops each daemon of a cluster runs beside its work: the election of the one daemon
that runs a transport allowing a single connection, and the adoption of what a dead daemon
accepted and left unanswered.

They know a transport by its name and the router by the callables they are given (a
coroutine function that runs the transport, the router's `adopt`): the state never imports
either.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import structlog

if TYPE_CHECKING:
    from rousseau.messages import Inbound
    from rousseau.state.postgres_daemon import PostgresDaemonState

__all__ = ["adopting", "elected"]

log = structlog.get_logger("rousseau.state")


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


async def adopting(cluster: PostgresDaemonState, adopt: Callable[[list[Inbound]], None]) -> None:
    """Every third of the lease, `adopt` (the router's) what a dead daemon of the cluster
    accepted and left unanswered."""
    while True:
        await anyio.sleep(cluster.lease / 3)
        try:
            adopt(await cluster.orphans())
        except Exception as exc:  # the database is away: the next round tries again
            log.warning("cluster.adopt_failed", error=str(exc))
