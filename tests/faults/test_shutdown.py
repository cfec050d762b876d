"""Stopping never overruns the grace period: a transport whose close hangs is left behind,
every other close is still attempted, and the store is always checkpointed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent.testing import ScriptedProvider, text_reply
from rousseau.daemon import Daemon
from rousseau.policy import ChatPolicy
from rousseau.transports.base import MemoryTransport
from tests.helpers import config_in

pytestmark = pytest.mark.anyio


class Hanging(MemoryTransport):
    """Its stop and close never return, as a wedged SDK's would."""

    async def stop(self) -> None:
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        await anyio.sleep_forever()


class Failing(MemoryTransport):
    async def aclose(self) -> None:
        raise ConnectionError("the close itself failed")


async def test_a_hung_close_cannot_hold_up_the_stop(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    config = config_in(tmp_path, ROUSSEAU_SHUTDOWN_GRACE="1s")
    hanging, failing, fine = Hanging("hanging"), Failing("failing"), MemoryTransport("fine")
    open_ = ChatPolicy(policy="open")
    daemon = Daemon(
        config,
        transports={"hanging": hanging, "failing": failing, "fine": fine},
        chat_policies={"hanging": open_, "failing": open_, "fine": open_},
        provider=ScriptedProvider([text_reply("hi")]),
    )
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with anyio.fail_after(20):
                while not fine.connected:
                    await anyio.sleep(0.02)
                await fine.inject("hello")
                await fine.wait_sent(1)
            daemon.stop()  # what SIGTERM does
            # Bounded by the grace plus the close deadline, not by the hung close.
            with anyio.fail_after(20):
                while "daemon.stopped" not in [e["event"] for e in logs]:
                    await anyio.sleep(0.05)
    closes = {e["what"]: e["error"] for e in logs if e["event"] == "daemon.close_failed"}
    assert set(closes) == {"hanging", "failing"}, closes
    # The WAL was checkpointed into the main file: nothing is left in it.
    assert not (tmp_path / "s.db-wal").exists() or (tmp_path / "s.db-wal").stat().st_size == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM outbox WHERE status = 'sent'").fetchone()[0] == 1
