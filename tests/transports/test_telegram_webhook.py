"""Telegram's webhook mode: the adapter sets the webhook with a secret, takes the updates the
fake Bot API posts, refuses a post without the secret, and answers an update it could not
persist with an error, so that it is posted again; the daemon serves the posts on the server
of their address."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

from rousseau import web
from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.messages import Inbound
from rousseau.transports.telegram import TelegramTransport, Webhook
from tests.fakes.telegram import FakeTelegram
from tests.helpers import config_in, free_port, serving

pytestmark = pytest.mark.anyio


async def test_posted_updates_are_taken_and_a_failed_one_is_posted_again(
    telegram: FakeTelegram,
) -> None:
    port = free_port()
    local = f"http://127.0.0.1:{port}/hook"
    telegram.balance = [local]
    transport = TelegramTransport(
        telegram.token,
        base_url=telegram.url,
        webhook=Webhook(url="https://bot.example.org/hook", listen=f"127.0.0.1:{port}"),
    )
    assert transport.shares_connections  # every daemon of a cluster may take posts
    taken: list[str] = []
    fail_first = True

    async def handler(inbound: Inbound) -> None:
        nonlocal fail_first
        if fail_first:  # the store could not persist it: not acknowledged
            fail_first = False
            raise RuntimeError("store down")
        taken.append(inbound.text)

    assert transport.posts is not None
    listener = await web.listen(f"127.0.0.1:{port}", "telegram.webhook")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(web.serve_posts, [transport.posts], listener)  # as the daemon does
        await tg.start(transport.run, handler)
        assert telegram.webhook is not None
        assert telegram.webhook["url"] == "https://bot.example.org/hook"
        secret = telegram.webhook["secret_token"]
        assert secret and telegram.token not in secret
        telegram.push("one")
        telegram.push("two")
        with anyio.fail_after(10):
            while taken != ["one", "two"]:
                await anyio.sleep(0.05)
        assert telegram.updates == []  # both acknowledged
        forged = json.dumps({"update_id": 1, "message": {"message_id": 9}}).encode()
        for header in ({}, {"X-Telegram-Bot-Api-Secret-Token": "guess"}):
            request = urllib.request.Request(local, data=forged, headers=header)
            with pytest.raises(urllib.error.HTTPError) as refused:
                await anyio.to_thread.run_sync(urllib.request.urlopen, request)
            refused.value.close()
            assert refused.value.code == 403
        await transport.stop()
        tg.cancel_scope.cancel()
    await transport.aclose()
    assert taken == ["one", "two"]  # the forged posts reached nobody


async def test_at_the_health_servers_address_the_posts_are_a_route_of_that_server(
    telegram: FakeTelegram, tmp_path: Path
) -> None:
    """One server, one set of limits: the webhook's route joins the server of /healthz when
    its address is that server's, and the daemon runs no server of its own for it."""
    port = free_port()
    telegram.balance = [f"http://127.0.0.1:{port}/hook"]
    transport = TelegramTransport(
        telegram.token,
        base_url=telegram.url,
        webhook=Webhook(url="https://bot.example.org/hook", listen=f"127.0.0.1:{port}"),
    )
    config = config_in(tmp_path, ROUSSEAU_HEALTH_LISTEN=f"127.0.0.1:{port}")
    assert web.servers(config, {"telegram": transport}) == {"health": f"127.0.0.1:{port}"}

    async def echo(request: Request) -> Response:
        return text_reply("echo: " + request.messages[-1].text)

    async with serving(transport, config, FunctionProvider(echo), ["42"]):
        telegram.push("hello")
        with anyio.fail_after(20):
            while not telegram.sent:
                await anyio.sleep(0.05)
        health = f"http://127.0.0.1:{port}/healthz"
        with await anyio.to_thread.run_sync(urllib.request.urlopen, health) as answer:
            assert json.loads(answer.read())["transports"]["telegram"]["connected"]
    assert [s.text for s in telegram.sent] == ["echo: hello"]
    assert telegram.posted_to == [f"http://127.0.0.1:{port}/hook"]
