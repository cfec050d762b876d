"""`rousseau backup create|verify|restore`: a backup made while the daemon answers (SQLite's
online backup) and of a PostgreSQL store (a snapshot of its tables) restores to the same
sessions, messages, cron jobs, media and key stores; a damaged backup fails `verify` naming
the part; no secret of the config is in a backup made without --with-secrets; a restore
never goes where a daemon runs or a store already is."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import tarfile
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.config import load_config
from rousseau.state.backup import BackupError, create, restore
from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU
from tests.test_daemon import Daemon, model

TABLES = ("sessions", "messages", "cron_jobs", "cron_runs", "chat_sessions", "transport_state")


@pytest.fixture
def llm(fake_llm: FakeLLMServer) -> FakeLLMServer:
    fake_llm.responder = model
    return fake_llm


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROUSSEAU, "--config", str(config), *args],
        env={"PATH": os.environ["PATH"], "HOME": str(config.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with closing(sqlite3.connect(db)) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}


def members(backup: Path) -> dict[str, bytes]:
    """Every part of a backup, decompressed where it is gzipped."""
    with tarfile.open(backup) as tar:
        found = {}
        for member in tar:
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            found[member.name] = gzip.decompress(data) if member.name.endswith(".gz") else data
    return found


def test_a_backup_made_while_the_daemon_answers_restores_what_it_held(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon = Daemon(tmp_path, telegram, llm)
    daemon.start()
    try:
        added = cli(
            daemon.config, "cron", "add", "--name", "daily", "--schedule", "@daily",
            "--prompt", "say hi", "--deliver-to", "telegram:42",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        telegram.push("what is this?", chat_id=42, user_id=42, caption=True)  # a photo
        telegram.wait_sent(1)
        busy = threading.Event()

        def load() -> None:  # messages keep coming while the backup is made
            n = 0
            while not busy.is_set():
                telegram.push(f"message {n}", chat_id=43, user_id=43)
                n += 1
                busy.wait(0.02)

        pusher = threading.Thread(target=load)
        pusher.start()
        try:
            made = cli(daemon.config, "backup", "create", str(tmp_path / "busy.tar"))
        finally:
            busy.set()
            pusher.join()
        assert made.returncode == 0, made.stderr
        assert (tmp_path / "busy.tar").stat().st_mode & 0o777 == 0o600
        checked = cli(daemon.config, "backup", "verify", str(tmp_path / "busy.tar"))
        assert checked.returncode == 0, checked.stderr
        assert "every part intact" in checked.stdout
        telegram.wait_sent(2)
        assert daemon.stop() == 0
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    live = tmp_path / "state.db"
    quiet = cli(daemon.config, "backup", "create", str(tmp_path / "quiet.tar"))
    assert quiet.returncode == 0, quiet.stderr
    for name in ("busy", "quiet"):
        target = tmp_path / f"restored-{name}.db"
        done = cli(daemon.config, "backup", "restore", str(tmp_path / f"{name}.tar"),
                   "--state", str(target))  # fmt: skip
        assert done.returncode == 0, done.stderr
        with closing(sqlite3.connect(target)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            jobs = conn.execute("SELECT name FROM cron_jobs").fetchall()
            assert jobs == [("daily",)]
    assert rows(tmp_path / "restored-quiet.db") == rows(live)  # the very same rows
    photos = [p for p in (tmp_path / "media").rglob("*") if p.is_file()]
    assert photos  # the photo's blob, which restore found already there
    blobs = members(tmp_path / "quiet.tar")
    assert all(blobs[f"media/{p.relative_to(tmp_path / 'media').as_posix()}"] == p.read_bytes()
               for p in photos)  # fmt: skip


def test_no_secret_in_a_backup_without_with_secrets(tmp_path: Path) -> None:
    token = "555555:backupSECRETbackupSECRETbackupSECRET"
    key = "sk-backupSECRETbackupSECRET"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "telegram": {"token": token, "allowlist": [42]},
                "openai": {"api_key": key},
                "state": {"path": str(tmp_path / "state.db")},
            }
        )
    )
    from rousseau.state import Store

    Store(tmp_path / "state.db").close()
    plain = cli(config, "backup", "create", str(tmp_path / "plain.tar"))
    assert plain.returncode == 0, plain.stderr
    assert "secrets are not in it" in plain.stdout
    everything = b"".join(members(tmp_path / "plain.tar").values())
    assert token.encode() not in everything and key.encode() not in everything
    kept = members(tmp_path / "plain.tar")["config/config.yaml"].decode()
    assert "token: env:TELEGRAM_BOT_TOKEN" in kept and "api_key: env:OPENAI_API_KEY" in kept
    full = cli(config, "backup", "create", "--with-secrets", str(tmp_path / "full.tar"))
    assert full.returncode == 0 and "holds the config's secrets" in full.stdout
    assert token.encode() in members(tmp_path / "full.tar")["config/config.yaml"]
    assert (tmp_path / "full.tar").stat().st_mode & 0o777 == 0o600
    assert token not in plain.stdout + plain.stderr + full.stdout + full.stderr


def test_a_damaged_backup_fails_verify_naming_the_part(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": {"path": str(tmp_path / "state.db")}}))
    from rousseau.state import Store

    Store(tmp_path / "state.db").close()
    backup = tmp_path / "b.tar"
    assert cli(config, "backup", "create", str(backup)).returncode == 0
    assert cli(config, "backup", "verify", str(backup)).returncode == 0
    with tarfile.open(backup) as tar:
        state = tar.getmember("state/sessions.db.gz")
    data = bytearray(backup.read_bytes())
    data[state.offset_data + state.size // 2] ^= 0xFF
    backup.write_bytes(bytes(data))
    damaged = cli(config, "backup", "verify", str(backup))
    assert damaged.returncode == 1
    assert "state/sessions.db.gz: damaged" in damaged.stderr
    cut = tmp_path / "cut.tar"
    cut.write_bytes(bytes(data[: state.offset_data + 10]))
    assert cli(config, "backup", "verify", str(cut)).returncode == 1


def test_key_stores_and_media_come_back_where_the_config_keeps_them(tmp_path: Path) -> None:
    keys = tmp_path / "matrix-keys"
    keys.mkdir()
    (keys / "rousseau_DEVICE.db").write_bytes(b"olm sessions " * 100)
    whatsapp = tmp_path / "whatsapp.db"
    with closing(sqlite3.connect(whatsapp)) as conn:
        conn.execute("CREATE TABLE device (jid TEXT)")
        conn.execute("INSERT INTO device VALUES ('15551234567@s.whatsapp.net')")
        conn.commit()
    media = tmp_path / "media" / "ab"
    media.mkdir(parents=True)
    (media / ("ab" + "0" * 62)).write_bytes(b"a photo")
    section = {
        "state": {"path": str(tmp_path / "state.db")},
        "matrix": {"homeserver_url": "https://m.example.org", "user_id": "@r:m.example.org",
                   "access_token": "syt_matrixSECRET", "encryption": True, "store": str(keys)},
        "whatsapp": {"store": str(whatsapp)},
    }  # fmt: skip
    (tmp_path / "config.yaml").write_text(json.dumps(section))
    from rousseau.state import Store

    Store(tmp_path / "state.db").close()
    config = load_config(str(tmp_path / "config.yaml"), {"HOME": str(tmp_path)})
    backup = tmp_path / "b.tar"
    anyio.run(lambda: create(config, backup))
    elsewhere = tmp_path / "elsewhere"
    moved = dict(section)
    moved["state"] = {"path": str(elsewhere / "state.db")}
    moved["matrix"] = {**section["matrix"], "store": str(elsewhere / "keys")}  # type: ignore[dict-item]
    moved["whatsapp"] = {"store": str(elsewhere / "whatsapp.db")}
    (elsewhere).mkdir()
    (elsewhere / "config.yaml").write_text(json.dumps(moved))
    target = load_config(str(elsewhere / "config.yaml"), {"HOME": str(elsewhere)})
    checked = anyio.run(
        lambda: restore(backup, target, state_path=elsewhere / "state.db", url=None)
    )
    assert (checked.media, checked.keys) == (1, 2)
    assert (elsewhere / "keys" / "rousseau_DEVICE.db").read_bytes() == b"olm sessions " * 100
    with closing(sqlite3.connect(elsewhere / "whatsapp.db")) as conn:
        assert conn.execute("SELECT jid FROM device").fetchall() == [
            ("15551234567@s.whatsapp.net",)
        ]
    assert (elsewhere / "media" / "ab" / ("ab" + "0" * 62)).read_bytes() == b"a photo"
    with pytest.raises(BackupError, match="exists: restore into a new state path"):
        anyio.run(lambda: restore(backup, target, state_path=elsewhere / "state.db", url=None))


def test_restore_refuses_where_a_daemon_runs(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon = Daemon(tmp_path, telegram, llm)
    daemon.start()
    try:
        assert cli(daemon.config, "backup", "create", str(tmp_path / "b.tar")).returncode == 0
        refused = cli(daemon.config, "backup", "restore", str(tmp_path / "b.tar"))
        assert refused.returncode == 1 and "a daemon runs on" in refused.stderr
    finally:
        daemon.stop()


def test_a_postgresql_store_round_trips(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer, postgres: Any
) -> None:
    """A SQLite store with conversations, a photo and a cron job moved to PostgreSQL, backed
    up from there and restored into a new database: every table holds the same rows."""
    import psycopg

    daemon = Daemon(tmp_path, telegram, llm)
    daemon.start()
    cli(daemon.config, "cron", "add", "--name", "daily", "--schedule", "@daily",
        "--prompt", "say hi", "--deliver-to", "telegram:42")  # fmt: skip
    telegram.push("what is this?", chat_id=42, user_id=42, caption=True)
    for n in range(5):
        telegram.push(f"message {n}", chat_id=43, user_id=43)
    telegram.wait_sent(6)
    assert daemon.stop() == 0
    source = postgres.new_database()
    moved = cli(daemon.config, "migrate-state", "--to", source)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    data = json.loads(daemon.config.read_text())
    data["state"]["url"] = source
    daemon.config.write_text(json.dumps(data))
    made = cli(daemon.config, "backup", "create", str(tmp_path / "pg.tar"))
    assert made.returncode == 0, made.stderr
    checked = cli(daemon.config, "backup", "verify", str(tmp_path / "pg.tar"))
    assert checked.returncode == 0 and "postgresql store" in checked.stdout, checked.stderr
    target = postgres.new_database()
    done = cli(daemon.config, "backup", "restore", str(tmp_path / "pg.tar"), "--database", target)
    assert done.returncode == 0, done.stdout + done.stderr

    def dump(url: str) -> dict[str, list[Any]]:
        with psycopg.connect(url) as conn:
            found = {}
            for table in ("sessions", "messages", "cron_jobs", "chat_sessions", "transport_state",
                          "tool_calls", "model_calls"):  # fmt: skip
                cursor = conn.execute(f"SELECT * FROM {table} ORDER BY 1")
                found[table] = cursor.fetchall()
            return found

    before, after = dump(source), dump(target)
    assert before["messages"] and before["cron_jobs"]
    assert after == before
    again = cli(daemon.config, "backup", "restore", str(tmp_path / "pg.tar"), "--database", target)
    assert again.returncode == 1 and "not empty" in again.stderr
    with psycopg.connect(target) as conn:  # new rows get new ids (the sequences follow)
        conn.execute("INSERT INTO cron_runs (job_id, scheduled_at, status) "
                     "SELECT id, 0, 'ok' FROM cron_jobs")  # fmt: skip


@pytest.mark.anyio
async def test_the_daemon_makes_backups_on_schedule_and_keeps_the_newest(tmp_path: Path) -> None:
    from rousseau.agent.testing import FunctionProvider, text_reply
    from rousseau.state.backup import verify
    from rousseau.transports.base import MemoryTransport
    from tests.helpers import config_in, serving, until

    folder = tmp_path / "backups"
    config = config_in(
        tmp_path, ROUSSEAU_BACKUP_DIR=str(folder), ROUSSEAU_BACKUP_EVERY="1s",
        ROUSSEAU_BACKUP_KEEP="2",
    )  # fmt: skip
    provider = FunctionProvider(lambda request: text_reply("ok"))
    async with serving(MemoryTransport(), config, provider, ["owner"]):
        await until(lambda: len(list(folder.glob("*.tar"))) == 2, 20)
        first = sorted(folder.glob("*.tar"))[0]
        await until(lambda: not first.exists(), 20)  # rotated out by a newer one
    kept = sorted(folder.glob("*.tar"))
    assert len(kept) == 2
    for backup in kept:
        assert verify(backup).manifest.backend == "sqlite"
