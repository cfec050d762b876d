"""A flood of idle connections to /healthz, past the daemon's open-files limit, never takes
the daemon down: it keeps answering chats, and health again once the flood is gone."""

from __future__ import annotations

import socket

from tests.fakes.telegram import FakeTelegram
from tests.faults.support import EchoModel, wait_until
from tests.test_daemon import Daemon


def test_400_idle_connections_under_ulimit_256(
    daemon: Daemon, telegram: FakeTelegram, echo: EchoModel
) -> None:
    daemon.open_files = 256
    daemon.start()
    idle: list[socket.socket] = []
    try:
        for _ in range(400):
            conn = socket.socket()
            conn.settimeout(5)
            try:
                conn.connect(("127.0.0.1", daemon.port))
            except OSError:  # the backlog is full: the flood is as big as it gets
                conn.close()
                break
            idle.append(conn)
        telegram.push("still there?")
        telegram.wait_sent(1)
        assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log.read_text()
    finally:
        for conn in idle:
            conn.close()
    assert wait_until(lambda: _healthy(daemon), timeout=30), daemon.log.read_text()[-2000:]
    assert [s.text for s in telegram.sent] == ["echo: still there?"]
    assert daemon.stop() == 0


def _healthy(daemon: Daemon) -> bool:
    try:
        return daemon.health()[0] == 200
    except OSError:
        return False
