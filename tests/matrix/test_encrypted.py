"""End-to-end encrypted Matrix rooms against the real Synapse: the bot reads and answers
encrypted, a person's own E2E client (matrix-nio, as Element would) decrypts, also after
the daemon restarts; encrypted images both ways; the key store private; an encrypted room
without `encryption` never answered in plain text, and named in a warning."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.cli.doctor import Report, _doctor_transports
from rousseau.config import Config, load_config
from rousseau.daemon import Daemon
from rousseau.transports import build_transports
from tests.helpers import until
from tests.matrix.person import PNG, Person
from tests.matrix.synapse import Synapse
from tests.matrix.test_matrix import People

nio = pytest.importorskip("nio")
if not nio.crypto.ENCRYPTION_ENABLED:
    pytest.skip("matrix-nio without its e2e extra", allow_module_level=True)

pytestmark = pytest.mark.anyio


def answer(request: Request) -> Response:
    last = request.messages[-1]
    if last.tool_results:
        return text_reply("sent")
    if "picture" in last.text:
        return tool_reply("send_file", path="red.png")
    images = [c for c in last.content if c.attachment is not None]
    if images:
        return text_reply(f"an image of {len(request.media[images[0].attachment.sha256])} bytes")
    return text_reply("echo: " + last.text)


def configured(synapse: Synapse, people: People, tmp: Path, *, encryption: bool) -> Config:
    (tmp / "ws").mkdir(exist_ok=True)
    (tmp / "ws" / "red.png").write_bytes(PNG)
    (tmp / "config.yaml").write_text(
        json.dumps({"agent": {"approver": {"allow": [{"tool": "send_file"}]}}})
    )
    config = load_config(
        str(tmp / "config.yaml"),
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "state" / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
            "ROUSSEAU_MATRIX_HOMESERVER_URL": synapse.url,
            "ROUSSEAU_MATRIX_USER_ID": people.bot_id,
            "MATRIX_PASSWORD": people.bot_password,
            "ROUSSEAU_MATRIX_ALLOWLIST": people.alice["user_id"],
            "ROUSSEAU_MATRIX_ENCRYPTION": "true" if encryption else "false",
        },
    )
    return config


@asynccontextmanager
async def bot(
    synapse: Synapse, people: People, tmp: Path, *, encryption: bool = True
) -> AsyncIterator[Daemon]:
    config = configured(synapse, people, tmp, encryption=encryption)
    transports = build_transports(config)
    daemon = Daemon(config, transports=transports, provider=FunctionProvider(answer))
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(30):
            while not transports["matrix"].connected:
                await anyio.sleep(0.05)
        yield daemon
        daemon.stop()


async def test_an_encrypted_room_is_answered_encrypted_also_after_a_restart(
    synapse: Synapse, tmp_path: Path
) -> None:
    people = People(synapse)
    alice = Person(synapse, people.alice, tmp_path / "alice-store")
    async with anyio.create_task_group() as tg:
        await alice.start(tg)
        room = await alice.encrypted_room(people.bot_id)
        async with bot(synapse, people, tmp_path):
            await until(lambda: people.bot_id in people.members(room), 30)
            await alice.say(room, "hello in secret")
            await until(lambda: alice.said_by(people.bot_id) == ["echo: hello in secret"], 30)
        # Only ciphertext is on the server: the bot's events there are m.room.encrypted.
        assert people.bot_messages(room) == []
        store = tmp_path / "state" / "matrix-keys"
        assert stat.S_IMODE(store.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in store.iterdir())
        devices = people.devices()
        # The owner sees the devices the bot knows, and can decide about one.
        env = {
            **os.environ,
            "HOME": str(tmp_path),
            "ROUSSEAU_STATE_PATH": str(tmp_path / "state" / "s.db"),
            "ROUSSEAU_MATRIX_HOMESERVER_URL": synapse.url,
            "ROUSSEAU_MATRIX_USER_ID": people.bot_id,
        }
        listed = await anyio.run_process(
            [sys.executable, "-m", "rousseau", "matrix", "devices"], env=env
        )
        phone = alice.client.device_id
        assert any(
            people.alice["user_id"] in ln and phone in ln
            for ln in listed.stdout.decode().splitlines()
        )
        verified = await anyio.run_process(
            [sys.executable, "-m", "rousseau", "matrix", "verify", people.alice["user_id"], phone],
            env=env,
        )
        assert b"applied at the transport's next sync" in verified.stdout

        async with bot(synapse, people, tmp_path) as daemon:  # the same device, sessions kept
            await alice.say(room, "still there?")
            await until(lambda: alice.said_by(people.bot_id)[-1:] == ["echo: still there?"], 30)
            assert people.devices() == devices
            known = await daemon.transports["matrix"].state.get("devices")
            mine = [d for d in json.loads(known) if d["device"] == phone]
            assert [d["trust"] for d in mine] == ["verified"]

            await alice.send_image(room)
            took = f"an image of {len(PNG)} bytes"
            await until(lambda: alice.said_by(people.bot_id)[-1:] == [took], 30)
            await alice.say(room, "send me the picture")
            await until(lambda: any(who == people.bot_id for who, _ in alice.images), 30)
        assert [data for who, data in alice.images if who == people.bot_id] == [PNG]
        assert all(decrypted for sender, _, decrypted in alice.texts if sender == people.bot_id)
        tg.cancel_scope.cancel()
    await alice.client.close()


async def test_without_encryption_an_encrypted_room_is_named_and_never_answered_in_plain(
    synapse: Synapse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    people = People(synapse)
    alice = Person(synapse, people.alice, tmp_path / "alice-store")
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            await alice.start(tg)
            room = await alice.encrypted_room(people.bot_id)
            async with bot(synapse, people, tmp_path, encryption=False):
                await until(lambda: people.bot_id in people.members(room), 30)
                # Named once it is joined, before anyone writes there.
                await until(lambda: any(e["event"] == "matrix.encrypted_room" for e in logs), 30)
                await alice.say(room, "can you read this?")
                await alice.say(room, "and this?")
                await anyio.sleep(1.5)
            tg.cancel_scope.cancel()
    await alice.client.close()
    assert [e["room"] for e in logs if e["event"] == "matrix.encrypted_room"] == [room]
    assert people.bot_messages(room) == [] and alice.said_by(people.bot_id) == []

    # The doctor names it too, as a warning (the login itself is fine).
    config = configured(synapse, people, tmp_path, encryption=False)
    report = Report()
    await anyio.to_thread.run_sync(_doctor_transports, config, report)
    lines = capsys.readouterr().out.splitlines()
    [finding] = [ln for ln in lines if ln.startswith("warn") and "matrix" in ln]
    assert room in finding and "set matrix.encryption: true" in finding
    assert not report.failed
