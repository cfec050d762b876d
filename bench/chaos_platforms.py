"""The platforms of the chaos benchmark: the project's fakes (tests/fakes, and the transport
harnesses built on them), each as a `rousseau run` reaches it through its config. Each
sends numbered messages from its chats, sends poison (malformed events as the fuzz suite
and tests/transports/test_poison_events.py make them), and reports what the bot sent back.

A chat is named by its sender's id, which is also its allowlist entry.
"""

from __future__ import annotations

import copy
import itertools
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

from twilio.request_validator import RequestValidator

from tests.fakes.slack import FakeSlack
from tests.fakes.sms import ACCOUNT_SID, AUTH_TOKEN, FakeTwilio
from tests.fakes.telegram import FakeTelegram
from tests.fuzz.test_imessage import MESSAGE as IMESSAGE_MESSAGE
from tests.fuzz.test_slack import EVENT as SLACK_EVENT
from tests.helpers import free_port
from tests.transports.harness_discord import DiscordHarness
from tests.transports.harness_imessage import IMessageHarness
from tests.transports.harness_signal import ACCOUNT as SIGNAL_ACCOUNT
from tests.transports.harness_signal import SignalHarness
from tests.transports.test_poison_events import TELEGRAM_POISONS, discord_poisons, spoil

MEMBERS = 3
"""The most daemons one row runs (the PostgreSQL cluster); each may need a port of its own."""


class Platform(Protocol):
    """One platform's fake, as the benchmark drives it."""

    name: str

    def chat(self, index: int) -> str:
        """The id of chat `index` (its sender's id)."""
        ...

    def section(self, member: int, chats: int) -> dict[str, Any]:
        """This transport's config for daemon `member`, admitting the first `chats` chats."""
        ...

    def send(self, chat: str, text: str) -> None:
        """A message from `chat`, delivered as the platform delivers it."""
        ...

    def poison(self, chat: str) -> int:
        """Malformed events seemingly from `chat`; returns how many were sent."""
        ...

    def replies(self) -> list[tuple[str, str]]:
        """What the bot sent so far, in order: (chat, text)."""
        ...

    def close(self) -> None: ...


class Telegram:
    """The fake Bot API, polled (on a cluster, by the daemon elected for it)."""

    name = "telegram"

    def __init__(self) -> None:
        self.fake = FakeTelegram().start()

    def chat(self, index: int) -> str:
        return str(1000 + index)

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "token": self.fake.token,
            "base_url": self.fake.url,
            "allowlist": [self.chat(i) for i in range(chats)],
            "streaming": "off",
        }

    def send(self, chat: str, text: str) -> None:
        self.fake.push(text, chat_id=int(chat), user_id=int(chat))

    def poison(self, chat: str) -> int:
        for path, value in TELEGRAM_POISONS.values():
            update = self.fake.update("poison", chat_id=int(chat), user_id=int(chat))
            self.fake.deliver(spoil(update, path, value))
        return len(TELEGRAM_POISONS)

    def replies(self) -> list[tuple[str, str]]:
        return [(str(s.chat_id), s.text) for s in list(self.fake.sent)]

    def close(self) -> None:
        self.fake.stop()


class Slack:
    """The fake Slack in Socket Mode, spreading events over every daemon's connection and
    sending an unacknowledged one again, as Slack does."""

    name = "slack"

    def __init__(self) -> None:
        self.fake = FakeSlack().start()
        self.fake.spread = True

    def chat(self, index: int) -> str:
        return f"U{index:04d}"

    def _channel(self, chat: str) -> str:
        return "D" + chat[1:]

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "app_token": self.fake.app_token,
            "bot_token": self.fake.bot_token,
            "base_url": self.fake.url + "/api/",
            "allowlist": [self.chat(i) for i in range(chats)],
            "streaming": "off",
        }

    def send(self, chat: str, text: str) -> None:
        self.fake.message(text, user=chat, channel=self._channel(chat))

    def poison(self, chat: str) -> int:
        # The fuzz suite's event with no files (they would be fetched from Slack itself).
        valid = {k: v for k, v in SLACK_EVENT.items() if k not in ("files", "thread_ts")}
        valid.update(channel=self._channel(chat), user=chat, channel_type="im")
        spoiled = [
            {**valid, "ts": "not a time"},
            {**valid, "ts": "nan"},
            {**valid, "subtype": ["unhashable"]},
            {**valid, "channel": {"id": self._channel(chat)}},
            {**valid, "text": {"nested": ["junk", 1]}},
        ]
        for event in spoiled:
            self.fake.send_event(event)
        return len(spoiled)

    def replies(self) -> list[tuple[str, str]]:
        return [("U" + p.channel[1:], p.text) for p in list(self.fake.posted)]

    def close(self) -> None:
        self.fake.stop()


class Discord:
    """The fake Discord gateway and REST API; direct messages from each chat's user."""

    name = "discord"

    def __init__(self) -> None:
        self.harness = DiscordHarness()
        self.fake = self.harness.fake

    def chat(self, index: int) -> str:
        return str(700000000000000100 + index)

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "token": self.fake.token,
            "api_base": self.fake.api_base,
            "gateway_url": self.fake.gateway_url,
            "allowlist": [self.chat(i) for i in range(chats)],
            "streaming": "off",
        }

    def send(self, chat: str, text: str) -> None:
        self.harness.dm(text, sender=chat)

    def poison(self, chat: str) -> int:
        poisons = discord_poisons(self.harness)
        for data in poisons.values():
            self.fake.dispatch("MESSAGE_CREATE", data)
        return len(poisons)

    def replies(self) -> list[tuple[str, str]]:
        # A direct channel's id is made from its user's, as the fake makes it.
        users = {str(600000000000000000 + int(u[-6:])): u for u in self.fake._dm_channels}
        return [(users.get(d.chat, d.chat), d.text) for d in self.harness.delivered()]

    def close(self) -> None:
        self.harness.close()


class Signal:
    """A fake signal-cli the daemon runs (the one elected for it, on a cluster); the
    benchmark injects what it prints through its control socket."""

    name = "signal"

    def __init__(self) -> None:
        self.harness = SignalHarness()

    @property
    def env(self) -> dict[str, str]:
        """What the daemon's environment passes on to the fake signal-cli."""
        return {
            "FAKE_SIGNAL_CONTROL": self.harness.control,
            "FAKE_SIGNAL_LOG": str(self.harness.log),
        }

    def chat(self, index: int) -> str:
        return f"+1555123{index:04d}"

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "binary": str(self.harness.binary),
            "account": SIGNAL_ACCOUNT,
            "extra_args": ["--config", str(self.harness.dir / "data")],
            "allowlist": [self.chat(i) for i in range(chats)],
        }

    def send(self, chat: str, text: str) -> None:
        self.harness.dm(text, sender=chat)

    def poison(self, chat: str) -> int:
        spoiled = []
        for change in ("mentions", "timestamp", "message"):
            envelope = self.harness.envelope("poison", source=chat)
            data = envelope["envelope"]["dataMessage"]
            if change == "mentions":
                data["mentions"] = "everyone"
            elif change == "timestamp":
                envelope["envelope"]["timestamp"] = "soon"
            else:
                data["message"] = 5
            spoiled.append(envelope)
        for envelope in spoiled:
            self.harness._inject(envelope)
        return len(spoiled)

    def replies(self) -> list[tuple[str, str]]:
        return [(d.chat, d.text) for d in self.harness.delivered()]

    def close(self) -> None:
        self.harness.close()


class IMessage:
    """The fake BlueBubbles server, polled (on a cluster, by the daemon elected for it)."""

    name = "imessage"

    def __init__(self) -> None:
        self.harness = IMessageHarness()
        self._poisons = itertools.count(1)

    def chat(self, index: int) -> str:
        return f"+1555124{index:04d}"

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "base_url": self.harness.server.url,
            "password": "bb-secret",
            "poll_interval": 0.2,
            "private_api": True,
            "allowlist": [self.chat(i) for i in range(chats)],
        }

    def send(self, chat: str, text: str) -> None:
        self.harness.dm(text, sender=chat)

    def poison(self, chat: str) -> int:
        changes: list[dict[str, Any]] = [
            {"chats": "not a list"},
            {"chats": [{"guid": 5}]},
            {"text": 12345},
            {"text": {"nested": ["junk", 1]}},
        ]
        for change in changes:
            message = copy.deepcopy(IMESSAGE_MESSAGE)
            message["handle"] = {"address": chat}
            message.update(change)
            message["guid"] = f"poison-{next(self._poisons)}"
            message["dateCreated"] = int(time.time() * 1000)
            self.harness.server.add(message)
        return len(changes)

    def replies(self) -> list[tuple[str, str]]:
        return [(d.chat.rsplit(";", 1)[-1], d.text) for d in self.harness.delivered()]

    def close(self) -> None:
        self.harness.close()


class SMS:
    """The fake Twilio API for replies; messages are posted to the daemons' webhooks as
    Twilio posts them (signed), to each daemon in turn until one takes it (a balancer)."""

    name = "sms"
    NUMBER = "+15550000000"
    PUBLIC = "https://sms.example.org/sms/twilio"
    """The address Twilio is told to post to: what signatures are computed over."""

    def __init__(self) -> None:
        self.fake = FakeTwilio().start()
        self.ports = [free_port() for _ in range(MEMBERS)]
        self.validator = RequestValidator(AUTH_TOKEN)
        self._sids = itertools.count(1)
        self._turn = itertools.count()

    def chat(self, index: int) -> str:
        return f"+1555125{index:04d}"

    def section(self, member: int, chats: int) -> dict[str, Any]:
        return {
            "provider": "twilio",
            "from": self.NUMBER,
            "account_sid": ACCOUNT_SID,
            "auth_token": AUTH_TOKEN,
            "base_url": self.fake.url,
            "webhook": {"listen": f"127.0.0.1:{self.ports[member]}", "public_url": self.PUBLIC},
            "allowlist": [self.chat(i) for i in range(chats)],
        }

    def _form(self, chat: str, text: str) -> dict[str, str]:
        sid = f"SM{next(self._sids):032d}"
        return {"MessageSid": sid, "From": chat, "To": self.NUMBER, "Body": text}

    def _post(self, form: dict[str, str], tries: int = 30) -> None:
        """Post as a balancer in front of the daemons would: to the next daemon that
        answers 200, for a few seconds at most."""
        body = urllib.parse.urlencode(form).encode()
        headers = {"X-Twilio-Signature": self.validator.compute_signature(self.PUBLIC, form)}
        for _ in range(tries):
            port = self.ports[next(self._turn) % len(self.ports)]
            url = f"http://127.0.0.1:{port}/sms/twilio"
            try:
                request = urllib.request.Request(url, data=body, headers=headers)
                with urllib.request.urlopen(request, timeout=10):
                    return
            except urllib.error.HTTPError as refused:
                if refused.code < 500:
                    return  # the daemon's answer to a post it will not take
            except OSError:
                pass  # nothing listens there (not elected, or restarting)
            time.sleep(0.1)
        raise ConnectionError(f"no daemon took an SMS post in {tries} tries")

    def send(self, chat: str, text: str) -> None:
        self._post(self._form(chat, text))

    def poison(self, chat: str) -> int:
        spoiled = [
            {**self._form(chat, "poison"), "MessageSid": "SM\x00"},
            {**self._form(chat, "poison"), "MessageSid": "x" * 100_000},
            {**self._form(chat, "poison"), "From": chat + "\x00"},
        ]
        for form in spoiled:
            self._post(form)
        return len(spoiled)

    def replies(self) -> list[tuple[str, str]]:
        with self.fake.lock:
            return [(s["To"], s["Body"]) for s in self.fake.sent]

    def close(self) -> None:
        self.fake.stop()


ALL: dict[str, type[Telegram | Slack | Discord | Signal | IMessage | SMS]] = {
    "telegram": Telegram,
    "slack": Slack,
    "discord": Discord,
    "signal": Signal,
    "imessage": IMessage,
    "sms": SMS,
}
"""Every transport whose platform a fake speaks over the wire (WhatsApp's fake is a client
in the test's own process; email and Matrix run against real servers in the tests)."""
