"""What the two SDKs on a Telegram + OpenAI daemon's path cost on their own.

python-telegram-bot (with aiohttp, as rousseau runs it) and the openai SDK are required
libraries; this measures each alone, in a fresh process of its own, doing for one message
what the daemon does with it against the same fakes:

- import: the seconds and resident MiB that importing it adds to a bare interpreter;
- CPU per message: Telegram, one getUpdates that returns one message and one sendMessage;
  OpenAI, one streamed chat completion read to its end. The process's own CPU (user +
  system) over `MESSAGES`, divided by them;
- and, for streamed replies, the CPU of one editMessageText (`edit_cost`, which
  `bench/router_load.py` uses).

`bench/daemon.py` runs it against its fakes and prints what remains for rousseau itself.
Run alone, it starts its own fakes:

    python bench/libraries.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = 500
TELEGRAM = ["aiohttp", "telegram", "telegram.request"]
OPENAI = ["aiohttp", "openai"]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def imported(names: list[str]) -> dict[str, float]:
    """Import `names`; what that cost this (bare) process."""
    started, rss = time.perf_counter(), rss_mib()
    for name in names:
        __import__(name)
    return {"import_s": time.perf_counter() - started, "import_mib": rss_mib() - rss}


def _bot(url: str, token: str) -> Any:
    """A Bot as the daemon makes it: python-telegram-bot over aiohttp."""
    import telegram

    sys.path.insert(0, str(ROOT))
    from rousseau.transports.telegram_http import AiohttpRequest

    return telegram.Bot(
        token,
        base_url=url + "/bot",
        request=AiohttpRequest(),
        get_updates_request=AiohttpRequest(connections=1, read_timeout=15),
    )


async def telegram_alone(url: str, token: str) -> float:
    async with _bot(url, token) as bot:
        offset: int | None = None
        started = cpu_seconds()
        for _ in range(MESSAGES):
            (update,) = await bot.get_updates(offset=offset, limit=1, timeout=10)
            offset = update.update_id + 1
            message = update.message
            assert message is not None
            await bot.send_message(chat_id=message.chat.id, text=f"echo: {message.text}")
        return cpu_seconds() - started


async def openai_alone(url: str) -> float:
    import openai

    client = openai.AsyncOpenAI(
        api_key="sk-bench", base_url=url + "/v1", http_client=openai.DefaultAioHttpClient()
    )
    async with client:
        started = cpu_seconds()
        for i in range(MESSAGES):
            # The SDK's leanest streamed call, the one rousseau makes (not the typed
            # `chat.completions.create`, which costs more): its client, auth and SSE parsing.
            stream: Any = await client.post(
                "/chat/completions",
                cast_to=object,
                body={
                    "model": "bench",
                    "messages": [{"role": "user", "content": f"alone {i}"}],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
                stream=True,
                stream_cls=openai.AsyncStream[object],
            )
            text = ""
            async for chunk in stream:
                for choice in chunk.get("choices") or []:
                    text += (choice.get("delta") or {}).get("content") or ""
            assert text, "the fake model answered nothing"
        return cpu_seconds() - started


async def telegram_edits(url: str, token: str) -> float:
    """`MESSAGES` edits of one message, each to a longer text: a streamed reply's previews."""
    async with _bot(url, token) as bot:
        sent = await bot.send_message(chat_id=900, text="word")
        started = cpu_seconds()
        for i in range(MESSAGES):
            await bot.edit_message_text(
                "word " * (i + 2) + "…", chat_id=900, message_id=sent.message_id
            )
        return cpu_seconds() - started


def child(which: str, args: list[str]) -> None:
    import asyncio

    if which == "both":  # their imports together share aiohttp: the floor of a daemon
        print(json.dumps(imported([*TELEGRAM, *OPENAI])))
        return
    if which in ("telegram", "telegram-edit"):
        cost = imported(TELEGRAM)
        cpu = asyncio.run((telegram_alone if which == "telegram" else telegram_edits)(*args))
    else:
        cost = imported(OPENAI)
        cpu = asyncio.run(openai_alone(*args))
    print(json.dumps({**cost, "cpu_ms_per_msg": cpu / MESSAGES * 1000}))


def measure(telegram: Any, llm_url: str) -> dict[str, dict[str, float]]:
    """Each SDK alone against these fakes (a FakeTelegram and a fake model's URL, whose
    responder must answer a streamed request), and both imported together ("both");
    figures by SDK name."""
    for i in range(MESSAGES):
        telegram.push(f"alone {i}", chat_id=900, user_id=900)
    runs = {
        "python-telegram-bot": ["telegram", telegram.url, telegram.token],
        "openai": ["openai", llm_url],
        "both": ["both"],
    }
    return {name: _child(name, args) for name, args in runs.items()}


def edit_cost(url: str, token: str) -> float:
    """python-telegram-bot's CPU milliseconds for one editMessageText, alone, against the
    fake Bot API at `url`."""
    return _child("python-telegram-bot edit", ["telegram-edit", url, token])["cpu_ms_per_msg"]


def _child(name: str, args: list[str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} alone failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3:])
        return
    sys.path.insert(0, str(ROOT))
    from tests.fakes.llm import FakeLLMServer, openai_completion, openai_stream
    from tests.fakes.telegram import FakeTelegram

    telegram = FakeTelegram().start()
    llm = FakeLLMServer().start()
    llm.responder = lambda recorded: openai_stream(openai_completion("echo"))
    try:
        figures = measure(telegram, llm.url)
        edit = edit_cost(telegram.url, telegram.token)
    finally:
        telegram.stop()
        llm.stop()
    for name, f in figures.items():
        cpu = f" {f['cpu_ms_per_msg']:.2f} ms CPU per message" if "cpu_ms_per_msg" in f else ""
        print(f"{name:<20} import {f['import_s']:.3f} s, +{f['import_mib']:.1f} MiB;{cpu}")
    print(f"{'one edit':<20} {edit:.2f} ms CPU (python-telegram-bot's editMessageText alone)")


if __name__ == "__main__":
    main()
