"""The supervisor keeps a failing transport retrying without stopping the others."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.config import Config
from rousseau.daemon import Daemon, sd_notify
from rousseau.policy import ChatPolicy
from rousseau.transports.base import MemoryTransport
from rousseau.transports.telegram import TelegramTransport
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.telegram import FakeTelegram
from tests.helpers import config_in, free_port

pytestmark = pytest.mark.anyio


def echo(recorded: Recorded) -> Reply:
    return openai_stream(openai_completion("echo: " + recorded.body["messages"][-1]["content"]))


def _config(tmp_path: Path, fake_llm: FakeLLMServer) -> Config:
    return config_in(
        tmp_path,
        ROUSSEAU_PROVIDER="openai",
        OPENAI_API_KEY="sk-test",
        ROUSSEAU_OPENAI_BASE_URL=fake_llm.url + "/v1",
    )


async def test_a_rejected_token_stops_its_transport_while_another_serves(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.responder = echo
    telegram = FakeTelegram(token="111:right").start()
    memory = MemoryTransport()
    broken = TelegramTransport("222:wrong", base_url=telegram.url)
    daemon = Daemon(
        _config(tmp_path, fake_llm),
        transports={"telegram": broken, "memory": memory},
        chat_policies={"memory": ChatPolicy(policy="open")},
    )
    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(daemon.run)
                with anyio.fail_after(20):
                    while not memory.connected:
                        await anyio.sleep(0.02)
                    while "transport.stopped" not in [e["event"] for e in logs]:
                        await anyio.sleep(0.05)
                    await memory.inject("still here?")
                    [out] = await memory.wait_sent(1)
                daemon.stop()
    finally:
        telegram.stop()
    assert out.text == "echo: still here?"
    [stopped] = [e for e in logs if e["event"] == "transport.stopped"]
    assert stopped["transport"] == "telegram"
    assert stopped["error"].startswith("telegram.token: the bot token was rejected")
    assert "222:wrong" not in str(logs)
    # Permanent: not retried with backoff.
    assert not [e for e in logs if e["event"] in ("transport.failed", "transport.restart")]
    assert not broken.connected


async def test_an_unreachable_platform_retries_while_another_serves(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:

    fake_llm.responder = echo
    memory = MemoryTransport()
    unreachable = TelegramTransport("111:right", base_url=f"http://127.0.0.1:{free_port()}")
    daemon = Daemon(
        _config(tmp_path, fake_llm),
        transports={"telegram": unreachable, "memory": memory},
        chat_policies={"memory": ChatPolicy(policy="open")},
    )
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with anyio.fail_after(20):
                while not memory.connected:
                    await anyio.sleep(0.02)
                await memory.inject("still here?")
                [out] = await memory.wait_sent(1)
                while sum(e["event"] == "transport.failed" for e in logs) < 2:
                    await anyio.sleep(0.05)
                await memory.inject("and now?")
                await memory.wait_sent(2)
            daemon.stop()
    assert out.text == "echo: still here?"
    failures = [e for e in logs if e["event"] == "transport.failed"]
    assert all(e["transport"] == "telegram" for e in failures)
    restarts = [e for e in logs if e["event"] == "transport.restart"]
    assert [e["attempt"] for e in restarts[:2]] == [1, 2]
    assert "daemon.stopped" in [e["event"] for e in logs]


def test_sd_notify_speaks_the_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert sd_notify("READY=1") is True
        assert server.recv(64) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert sd_notify("READY=1") is False


async def test_start_up_objects_are_frozen_out_of_the_collector_until_the_daemon_stops(
    tmp_path: Path,
) -> None:
    """A full collection walking start-up's long-lived objects held the event loop 50-110 ms
    under load: while the daemon serves they are frozen, and handed back when it stops. Full
    collections, which walk the sessions held in memory too, come ten times less often than
    Python's default while it serves; the thresholds are restored when it stops."""
    import gc

    from rousseau.agent import Request, Response
    from rousseau.agent.testing import FunctionProvider, text_reply
    from rousseau.daemon import FULL_COLLECTION_EVERY

    thresholds = gc.get_threshold()

    async def answer(request: Request) -> Response:
        full = gc.get_threshold()[2]
        return text_reply(f"frozen: {gc.get_freeze_count()} full: {full}")

    memory = MemoryTransport()
    daemon = Daemon(
        config_in(tmp_path),
        transports={"memory": memory},
        chat_policies={"memory": ChatPolicy(policy="open")},
        provider=FunctionProvider(answer),
    )
    assert gc.isenabled() and gc.get_freeze_count() == 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(20):
            while not memory.connected:
                await anyio.sleep(0.02)
            await memory.inject("hello")
            [out] = await memory.wait_sent(1)
        assert gc.isenabled()
        daemon.stop()
    frozen, full = out.text.removeprefix("frozen: ").split(" full: ")
    assert int(frozen) > 10_000
    assert int(full) == FULL_COLLECTION_EVERY > thresholds[2]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
