"""The web face: malformed OpenAI-compatible API bodies and web chat messages never raise past
their boundary (a body it cannot read is a 4xx, never a 500), a lone surrogate in what a
client posted is shown as U+FFFD, and a normal call right after is answered."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rousseau.agent.testing import FunctionProvider
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.messages import Inbound
from rousseau.web.api import _last_user_text
from rousseau.web.chat import WebChat
from tests.fuzz.events import FUZZ, junk, odd_text, sound, spoiled
from tests.helpers import free_port
from tests.transports.test_poison_events import short_echo, until
from tests.web.conftest import ALICE_KEY

pytestmark = pytest.mark.anyio

MESSAGES: list[Any] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url"}]},
]


@given(st.one_of(spoiled({"messages": MESSAGES}).map(lambda b: b.get("messages")), junk))
@example([{"role": "user", "content": [{"type": "text", "text": 5}]}])
@FUZZ
def test_the_last_user_text_is_read_or_none(messages: Any) -> None:
    text = _last_user_text(messages)
    assert text is None or isinstance(text, str)


@given(st.one_of(odd_text, st.sampled_from(["a\x00b", "x" * 100_000 + "\udc80"])))
@FUZZ
async def test_what_the_web_chat_hands_over_is_sound(text: str) -> None:
    chat = WebChat()
    taken: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        taken.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(chat.run, handler)
        await chat.say("alice", "alice", text)
        await chat.stop()
    [inbound] = taken
    sound(inbound)


BODIES: list[bytes] = [
    b"{not json",
    b"\xff\xfe",
    json.dumps(["a", "list"]).encode(),
    json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}).encode(),
    json.dumps({"messages": "hello"}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": ["x"]}).encode(),
    json.dumps(
        {"messages": [{"role": "user", "content": "half \ud800 a pair"}], "user": {}}
    ).encode(),
    json.dumps({"messages": [{"role": "user", "content": "a\x00b"}], "stream": "yes"}).encode(),
]


async def test_malformed_api_bodies_are_refused_or_answered_never_a_500(tmp_path: Path) -> None:
    import httpx

    port = free_port()
    key = {"key": ALICE_KEY, "owner": "alice"}
    settings = {"web": {"listen": f"127.0.0.1:{port}", "api_keys": [key]}}
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    env = {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")}
    config = load_config(tmp_path / "config.yaml", env)
    daemon = Daemon(config, provider=FunctionProvider(short_echo))
    headers = {"authorization": f"Bearer {ALICE_KEY}", "content-type": "application/json"}
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await until(lambda: all(t.connected for t in daemon.transports.values()))
            post = functools.partial(client.post, "/v1/chat/completions", headers=headers)
            answers = [await post(content=body) for body in BODIES]
            normal = await post(json={"messages": [{"role": "user", "content": "and this?"}]})
        daemon.stop()
    assert [a.status_code for a in answers] == [400, 400, 400, 400, 400, 404, 200, 200]
    assert answers[6].json()["choices"][0]["message"]["content"] == "echo: half \ufffd a pair"
    streamed = [json.loads(line[6:]) for line in answers[7].text.splitlines()[:-2] if line]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in streamed)
    assert text == "echo: a\ufffdb"
    assert normal.json()["choices"][0]["message"]["content"] == "echo: and this?"
