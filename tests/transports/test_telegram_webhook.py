"""Telegram's webhook mode: the adapter sets the webhook with a secret, takes the updates the
fake Bot API posts, refuses a post without the secret, and answers an update it could not
persist with an error, so that it is posted again."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anyio
import pytest

from rousseau.messages import Inbound
from rousseau.transports.telegram import TelegramTransport, Webhook
from tests.fakes.telegram import FakeTelegram
from tests.helpers import free_port

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

    async with anyio.create_task_group() as tg:
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
    await transport.aclose()
    assert taken == ["one", "two"]  # the forged posts reached nobody
