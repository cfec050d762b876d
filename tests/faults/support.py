"""Helpers of the fault tests: an echoing model that names each answer's question, config
edits, polling, and what the fake Bot API and the daemon's metrics and log tell."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.llm import Recorded, Reply, Sleep, openai_completion, openai_stream
from tests.fakes.telegram import FakeTelegram
from tests.test_daemon import Daemon


class RecordingTelegram(FakeTelegram):
    """The fake Bot API, also keeping each getUpdates call: (offset, update ids it returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.polls: list[tuple[int, list[int]]] = []

    def _api_getUpdates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        returned: list[int] = []
        self.polls.append((int(params.get("offset") or 0), returned))  # in the order asked
        status, body = super()._api_getUpdates(params)
        if status == 200:
            returned.extend(int(u["update_id"]) for u in body["result"])
        return status, body

    def received(self, ids: list[int], since: int) -> bool:
        """Calls made after the first `since` (by a bot started since) returned all of `ids`,
        in one batch or several, and that bot then asked for updates past them."""
        polls = self.polls[since:]
        returned = {update_id for _, batch in polls for update_id in batch}
        return set(ids) <= returned and any(offset > max(ids) for offset, _ in polls)


class EchoModel:
    """Answers `echo: ` + the text of the request's last message, whoever wrote it, after a
    random 0-50 ms: a reply names its question, and an answer to a saved answer shows as
    `echo: echo: ...`. Keeps every text it produced, in order."""

    def __init__(self, max_delay: float = 0.05) -> None:
        self.max_delay = max_delay
        self.produced: list[str] = []
        self._random = random.Random()

    def __call__(self, recorded: Recorded) -> Reply:
        text = f"echo: {_content(recorded.body['messages'][-1].get('content'))}"
        self.produced.append(text)
        delay = self._random.uniform(0.0, self.max_delay)
        return Sleep(delay, openai_stream(openai_completion(text)))


def _content(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content)
    return "" if content is None else str(content)


def edit_config(daemon: Daemon, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change the config the daemon reads at its next start."""
    config = json.loads(daemon.config.read_text())
    edit(config)
    daemon.config.write_text(json.dumps(config))


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.02) -> bool:
    """Poll `condition` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def wait_progress(count: Callable[[], int], target: int, stall: float) -> bool:
    """Poll `count` until it reaches `target` (True), or until it has not grown for `stall`
    seconds (False): a slow machine is waited for as long as the work moves."""
    seen, since = count(), time.monotonic()
    while seen < target:
        time.sleep(0.1)
        now = count()
        if now > seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > stall:
            return False
    return True


def acknowledged(telegram: FakeTelegram, update_id: int) -> bool:
    """The bot has asked for updates past `update_id`: Telegram would never send it again."""
    return any(offset > update_id for offset in list(telegram.offsets))


def replies_recorded(daemon: Daemon) -> float:
    """Reply parts the running daemon has sent and recorded as sent (its metrics)."""
    try:
        metrics = daemon.metrics()
    except OSError:
        return 0.0
    found = re.search(r'^rousseau_replies_sent_total\{transport="telegram"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def log_events(daemon: Daemon, *names: str) -> dict[str, int]:
    """How often each of these events appears in the daemon's log, over all its runs."""
    counts = dict.fromkeys(names, 0)
    for event in daemon.events():
        name = event.get("event")
        if name in counts:
            counts[name] += 1
    return counts
