"""Cron inside the daemon: jobs added and removed from the CLI while it runs, delivery through
the real Telegram adapter to a fake Bot API, retries, restarts, and the `cron` tool."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import load_config
from rousseau.cron import CronJobs
from rousseau.daemon import Daemon
from rousseau.state import Store
from rousseau.state.sqlite_cron import SqliteCronJobs
from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.helpers import ROUSSEAU, serving
from tests.transports.harness_telegram import TelegramHarness

pytestmark = pytest.mark.anyio


def answer(request: Request) -> Response:
    last = request.messages[-1]
    if last.tool_results:
        return text_reply("Done: I will remind you.")
    text = last.text
    if text.startswith("remind me"):
        return tool_reply(
            "cron",
            action="add",
            name="report",
            schedule="0 9 * * 1",
            prompt="Remind the user to send the weekly report.",
        )
    return text_reply(f"cron says: {text}")


@pytest.fixture
def telegram() -> Any:
    harness = TelegramHarness()
    yield harness
    harness.close()


def environment(tmp: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp),
        "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
        "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
        "ROUSSEAU_CRON_POLL_INTERVAL": "0.3",
        "ROUSSEAU_CRON_TIMEZONE": "UTC",
    }


@asynccontextmanager
async def daemon(telegram: TelegramHarness, tmp: Path, **env: str) -> AsyncIterator[Daemon]:
    config = load_config(None, {**environment(tmp), **env})
    async with serving(telegram.transport(), config, FunctionProvider(answer), ["42"]) as made:
        yield made


def cli(tmp: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**environment(tmp), "PATH": "/usr/bin:/bin", **extra}
    return subprocess.run([*ROUSSEAU, *args], env=env, capture_output=True, text=True, timeout=60)


async def sent(telegram: TelegramHarness, count: int) -> list[str]:
    with anyio.fail_after(20):
        while len(telegram.fake.sent) < count:
            await anyio.sleep(0.05)
    return [f"{s.chat_id}: {s.text}" for s in telegram.fake.sent]


async def test_cli_jobs_go_live_deliver_and_stop(telegram: TelegramHarness, tmp_path: Path) -> None:
    async with daemon(telegram, tmp_path):
        added = await anyio.to_thread.run_sync(
            lambda: cli(
                tmp_path,
                "cron",
                "add",
                "--name",
                "tick",
                "--schedule",
                "@every 1s",
                "--prompt",
                "tick",
                "--deliver-to",
                "telegram:42",
            )
        )
        assert added.returncode == 0, added.stderr
        assert (await sent(telegram, 2))[:2] == ["42: cron says: tick"] * 2
        removed = await anyio.to_thread.run_sync(lambda: cli(tmp_path, "cron", "remove", "tick"))
        assert removed.returncode == 0 and "removed tick" in removed.stdout
        await anyio.sleep(1.0)  # the removal is read within the poll interval
        settled = len(telegram.fake.sent)
        await anyio.sleep(1.5)
        assert len(telegram.fake.sent) == settled


async def test_a_restart_neither_doubles_nor_loses_a_run(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    with Store(tmp_path / "s.db") as store:
        await CronJobs(SqliteCronJobs(store)).add(
            "tick", "@every 2s", "tick", "telegram:42", timezone="UTC"
        )
    for _ in range(2):
        async with daemon(telegram, tmp_path):
            await anyio.sleep(2.5)
    with Store(tmp_path / "s.db") as store:
        runs = await SqliteCronJobs(store).runs()
    times = [r.scheduled_at for r in runs]
    assert len(times) == len(set(times)) >= 2  # each scheduled time once
    ok = [r for r in runs if r.status == "ok"]
    assert len(telegram.fake.sent) == len(ok)


def says(recorded: Recorded) -> Reply:
    return openai_stream(
        openai_completion("cron says: " + recorded.body["messages"][-1]["content"])
    )


async def test_cron_run_now_and_a_failed_delivery_is_retried(
    telegram: TelegramHarness, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """`cron run` runs the turn in the CLI (against a model on 127.0.0.1); the running
    daemon delivers its reply, retrying after Telegram's flood control says wait."""
    fake_llm.responder = says
    model = {
        "ROUSSEAU_PROVIDER": "openai",
        "OPENAI_API_KEY": "sk-test",
        "ROUSSEAU_OPENAI_BASE_URL": fake_llm.url + "/v1",
    }
    telegram.fake.flood_once = 1  # the first sendMessage gets 429 retry_after=1
    with Store(tmp_path / "s.db") as store:
        await CronJobs(SqliteCronJobs(store)).add(
            "once", "@every 1h", "hello", "telegram:42", timezone="UTC"
        )
        job = await CronJobs(SqliteCronJobs(store)).get("once")
    async with daemon(telegram, tmp_path) as running:
        del running
        ran = await anyio.to_thread.run_sync(lambda: cli(tmp_path, "cron", "run", "once", **model))
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "cron says: hello"
        assert await sent(telegram, 1) == ["42: cron says: hello"]
        assert telegram.fake.flood_once is None  # the first attempt was refused
    # Stopped cleanly (what it had still to send went out first): nothing more came.
    assert len(telegram.fake.sent) == 1
    with Store(tmp_path / "s.db") as store:
        [run] = await SqliteCronJobs(store).runs(job.id)
    assert run.status == "ok"


async def test_the_cron_tool_targets_the_asking_chat(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    allow = {"ROUSSEAU_AGENT_APPROVER_MODE": "pattern"}
    config_file = tmp_path / "config.yaml"
    config_file.write_text("agent:\n  approver:\n    mode: pattern\n    allow: [{tool: cron}]\n")
    async with daemon(telegram, tmp_path, ROUSSEAU_CONFIG=str(config_file), **allow):
        await anyio.to_thread.run_sync(telegram.dm, "remind me every Monday at 9 to send it")
        assert await sent(telegram, 1) == ["42: Done: I will remind you."]
    with Store(tmp_path / "s.db") as store:
        [job] = await SqliteCronJobs(store).all()
    assert (job.name, job.schedule, job.deliver_to) == ("report", "0 9 * * 1", "telegram:42")


async def test_the_cron_tool_is_denied_by_default(
    telegram: TelegramHarness, tmp_path: Path
) -> None:
    async with daemon(telegram, tmp_path):
        await anyio.to_thread.run_sync(telegram.dm, "remind me every Monday at 9 to send it")
        await sent(telegram, 1)
    with Store(tmp_path / "s.db") as store:
        assert await SqliteCronJobs(store).all() == []


def test_cli_refuses_bad_jobs_in_one_line(tmp_path: Path) -> None:
    for args, message in (
        (["--schedule", "61 * * * *", "--deliver-to", "telegram:42"], "bad schedule"),
        (["--schedule", "@every 5m", "--deliver-to", "pigeon:42"], "unknown transport 'pigeon'"),
        (["--schedule", "@every 5m", "--deliver-to", "telegram:bob"], "bad telegram recipient"),
    ):
        done = cli(tmp_path, "cron", "add", "--name", "x", "--prompt", "p", *args)
        assert done.returncode == 1 and message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    ok = cli(
        tmp_path,
        "cron",
        "add",
        "--name",
        "morning",
        "--schedule",
        "CRON_TZ=Europe/Paris 0 8 * * 1-5",
        "--prompt",
        "summarise my inbox",
        "--deliver-to",
        "telegram:42",
    )
    assert ok.returncode == 0, ok.stderr
    again = cli(
        tmp_path,
        "cron",
        "add",
        "--name",
        "morning",
        "--schedule",
        "@daily",
        "--prompt",
        "p",
        "--deliver-to",
        "telegram:42",
    )
    assert again.returncode == 1 and "exists already" in again.stderr
    listed = cli(tmp_path, "cron", "list").stdout
    assert "morning  [CRON_TZ=Europe/Paris 0 8 * * 1-5]  next: " in listed
    assert "CET  last: -  -> telegram:42" in listed  # shown in the job's own zone
    assert "disabled" in cli(tmp_path, "cron", "disable", "morning").stdout
    assert cli(tmp_path, "cron", "remove", "nothing").returncode == 1
