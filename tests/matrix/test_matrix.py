"""Matrix end to end against a real Synapse homeserver on 127.0.0.1."""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.messages import Inbound, MemoryKeyValue
from rousseau.transports import build_transports
from tests.helpers import running_transport, taken_side_by_side
from tests.matrix.synapse import Synapse
from tests.transports.harness_matrix import MatrixHarness

pytestmark = pytest.mark.anyio


def echo(request: Request) -> Response:
    return text_reply("echo: " + request.messages[-1].text)


class People:
    def __init__(self, synapse: Synapse) -> None:
        tag = secrets.token_hex(3)
        self.synapse = synapse
        self.alice = synapse.register(f"alice{tag}")
        self.bob = synapse.register(f"bob{tag}")
        self.bot_name = f"bot{tag}"
        self.bot_password = "bot-password-123"
        self.bot = synapse.register(self.bot_name, self.bot_password)
        self.bot_id = self.bot["user_id"]

    def say(
        self, who: dict[str, Any], room: str, body: str, mentions: list[str] | None = None
    ) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if mentions is not None:
            content["m.mentions"] = {"user_ids": mentions}
        txn = secrets.token_hex(8)
        path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/send/m.room.message/{txn}"
        return str(self.synapse.call("PUT", path, content, token=who["access_token"])["event_id"])

    def bot_messages(self, room: str) -> list[str]:
        path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/messages?dir=b&limit=100"
        chunk = self.synapse.call("GET", path, token=self.alice["access_token"])["chunk"]
        return [
            e["content"]["body"]
            for e in reversed(chunk)
            if e["type"] == "m.room.message" and e["sender"] == self.bot_id
        ]

    def members(self, room: str, who: dict[str, Any] | None = None) -> set[str]:
        path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room)}/joined_members"
        token = (who or self.alice)["access_token"]
        return set(self.synapse.call("GET", path, token=token)["joined"])

    def devices(self) -> int:
        found = self.synapse.call(
            "GET", "/_matrix/client/v3/devices", token=self.bot["access_token"]
        )
        return len(found["devices"])


@asynccontextmanager
async def running(
    synapse: Synapse, people: People, tmp: Path, *, speech: bool = False
) -> AsyncIterator[None]:
    config = load_config(
        str(tmp / "config.yaml") if speech else None,
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
            "ROUSSEAU_MATRIX_HOMESERVER_URL": synapse.url,
            "ROUSSEAU_MATRIX_USER_ID": people.bot_id,
            "MATRIX_PASSWORD": people.bot_password,
            "ROUSSEAU_MATRIX_ALLOWLIST": people.alice["user_id"],
        },
    )
    transports = build_transports(config)
    daemon = Daemon(config, transports=transports, provider=FunctionProvider(echo))
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(30):
            while not transports["matrix"].connected:
                await anyio.sleep(0.05)
        yield
        daemon.stop()


async def wait_for(check: Any) -> None:
    with anyio.fail_after(20):
        while not await anyio.to_thread.run_sync(check):
            await anyio.sleep(0.1)


async def test_invite_dm_rooms_mentions_and_restart(synapse: Synapse, tmp_path: Path) -> None:
    people = People(synapse)
    alice = people.alice
    dm = synapse.call(
        "POST",
        "/_matrix/client/v3/createRoom",
        {"is_direct": True, "invite": [people.bot_id], "preset": "trusted_private_chat"},
        token=alice["access_token"],
    )["room_id"]
    team = synapse.call(
        "POST",
        "/_matrix/client/v3/createRoom",
        {
            "invite": [people.bot_id, people.bob["user_id"]],
            "preset": "private_chat",
            "name": "Team",
        },
        token=alice["access_token"],
    )["room_id"]
    synapse.call(
        "POST",
        f"/_matrix/client/v3/join/{urllib.parse.quote(team)}",
        {},
        token=people.bob["access_token"],
    )
    # A stranger's invite is not accepted.
    stranger_room = synapse.call(
        "POST",
        "/_matrix/client/v3/createRoom",
        {"invite": [people.bot_id]},
        token=people.bob["access_token"],
    )["room_id"]

    async with running(synapse, people, tmp_path):
        await wait_for(
            lambda: people.bot_id in people.members(dm) and people.bot_id in people.members(team)
        )
        people.say(alice, dm, "hello bot")
        await wait_for(lambda: people.bot_messages(dm) == ["echo: hello bot"])
        people.say(alice, team, "just chatting among us")
        people.say(alice, team, f"{people.bot_name}: what's up?", mentions=[people.bot_id])
        await wait_for(lambda: len(people.bot_messages(team)) == 1)
        [answer] = people.bot_messages(team)
        assert answer.startswith("echo: ") and answer.endswith(f"{people.bot_name}: what's up?")
        assert people.bot_id not in people.members(stranger_room, who=people.bob)
    devices = people.devices()

    # After a restart: nothing old is answered again, new messages are, and no new device.
    async with running(synapse, people, tmp_path):
        people.say(alice, dm, "still there?")
        await wait_for(lambda: people.bot_messages(dm) == ["echo: hello bot", "echo: still there?"])
    # Stopped cleanly (what it had still to send went out first): nothing old came again.
    assert people.bot_messages(dm) == ["echo: hello bot", "echo: still there?"]
    assert people.devices() == devices
    assert len(people.bot_messages(team)) == 1


async def test_a_sync_takes_its_rooms_side_by_side(synapse: Synapse) -> None:
    """The messages one sync brings from two rooms are handed over together (so they are
    stored in one commit), not one room after the other."""
    harness = MatrixHarness(synapse)
    rooms = (harness.dm_chat, harness.group_chat)
    state = MemoryKeyValue()

    async def nothing(inbound: Inbound) -> None:
        pass

    first = harness.transport()
    first.bind_state(state)
    async with running_transport(first, nothing):
        for room in rooms:  # invited by their owner: joined
            await anyio.to_thread.run_sync(harness._wait_bot_joined, room)
    # While it is stopped, a message in each room: the next sync brings both.
    await anyio.to_thread.run_sync(harness._say, harness.alice, rooms[0], "one")
    await anyio.to_thread.run_sync(harness._say, harness.alice, rooms[1], "two")
    second = harness.transport()
    second.bind_state(state)
    assert sorted(await taken_side_by_side(second, rooms)) == sorted(rooms)


async def test_a_voice_note_is_answered_with_a_matrix_voice_message(
    synapse: Synapse, tmp_path: Path
) -> None:
    """MSC3245: an m.audio event with the voice flag, its duration and waveform (MSC1767),
    whose file (downloaded as a client does) is OGG/Opus of the length spoken; the text
    first."""
    import io
    import json

    av = pytest.importorskip("av", reason="PyAV (the voice extra) reads the voice notes")
    from tests.fakes.speech import SECONDS_PER_CHAR, FakeSpeech

    speech = FakeSpeech().start()
    people = People(synapse)
    alice = people.alice
    dm = synapse.call(
        "POST",
        "/_matrix/client/v3/createRoom",
        {"is_direct": True, "invite": [people.bot_id], "preset": "trusted_private_chat"},
        token=alice["access_token"],
    )["room_id"]
    (tmp_path / "config.yaml").write_text(
        json.dumps({"speech": {"base_url": speech.base_url, "model": "tts-1"}})
    )
    try:
        async with running(synapse, people, tmp_path, speech=True):
            await wait_for(lambda: people.bot_id in people.members(dm))
            uploaded = json.loads(
                synapse.raw(
                    "POST",
                    "/_matrix/media/v3/upload?filename=note.ogg",
                    b"OggS" + bytes(300),
                    alice["access_token"],
                    "audio/ogg",
                )
            )["content_uri"]
            content = {
                "msgtype": "m.audio",
                "body": "Voice message",
                "url": uploaded,
                "info": {"mimetype": "audio/ogg", "size": 304, "duration": 2000},
                "org.matrix.msc3245.voice": {},
            }
            path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(dm)}/send/m.room.message/v1"
            synapse.call("PUT", path, content, token=alice["access_token"])

            def voice_events() -> list[dict[str, Any]]:
                path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(dm)}/messages?dir=b"
                chunk = synapse.call("GET", path, token=alice["access_token"])["chunk"]
                return [
                    e for e in reversed(chunk)
                    if e["sender"] == people.bot_id and e["type"] == "m.room.message"
                ]  # fmt: skip

            def spoken() -> bool:
                return any(e["content"]["msgtype"] == "m.audio" for e in voice_events())

            await wait_for(spoken)
    finally:
        speech.stop()
    kinds = [e["content"]["msgtype"] for e in voice_events()]
    assert kinds[-1] == "m.audio" and "m.audio" not in kinds[:-1]  # the texts first
    text, voice = voice_events()[0], voice_events()[-1]
    assert text["content"]["msgtype"] == "m.text" and text["content"]["body"].startswith("echo:")
    said = voice["content"]
    assert said["msgtype"] == "m.audio" and "org.matrix.msc3245.voice" in said
    assert said["info"]["mimetype"] == "audio/ogg"
    waveform = said["org.matrix.msc1767.audio"]["waveform"]
    assert len(waveform) == 64 and max(waveform) == 1024
    server, media = said["url"].removeprefix("mxc://").split("/")
    data = synapse.raw(
        "GET", f"/_matrix/client/v1/media/download/{server}/{media}", None, alice["access_token"]
    )
    with av.open(io.BytesIO(data)) as note:
        assert (note.format.name, note.streams.audio[0].codec_context.name) == ("ogg", "opus")
        seconds = note.duration / 1_000_000
    [spoken] = speech.said
    assert abs(seconds - len(spoken.text) * SECONDS_PER_CHAR) < 0.2
    assert abs(said["info"]["duration"] - seconds * 1000) < 50  # (the container pads Opus)
