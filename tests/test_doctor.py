"""`rousseau doctor` finds what actually goes wrong, `--fix` repairs what it safely can, and
no line it prints holds a secret."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
from pathlib import Path

import yaml

from rousseau.state.lock import DaemonLock
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU, free_port

TOKEN = "555555:doctorSECRETdoctorSECRETdoctorSECRET"


def config(tmp: Path, **sections: object) -> Path:
    data: dict[str, object] = {
        "provider": "openai",
        "openai": {
            "api_key": "sk-doctorSECRETdoctorSECRET",
            "base_url": f"http://127.0.0.1:{free_port()}/v1",
            "max_retries": 0,
        },
        "state": {"path": str(tmp / "state" / "s.db")},
        "agent": {"workspace": str(tmp / "ws")},
        **sections,
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path


def doctor(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(path.parent)}
    done = subprocess.run(
        [*ROUSSEAU, "--config", str(path), "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert "SECRET" not in done.stdout + done.stderr
    return done


def lines(done: subprocess.CompletedProcess[str], tag: str) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(tag)]


def test_an_empty_allowlist_and_ids_of_the_wrong_shape(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    path = config(
        tmp_path,
        telegram={"token": TOKEN, "base_url": url, "allowlist": []},
        matrix={
            "homeserver_url": url,
            "user_id": "@bot:example.org",
            "access_token": "syt_doctorSECRET",
            "allowlist": ["alice"],
        },
    )
    done = doctor(path)
    assert done.returncode == 1
    fails = "\n".join(lines(done, "FAIL"))
    assert "telegram   nobody can talk to the bot: telegram.allowlist is empty" in fails
    assert "matrix.allowlist: 'alice' cannot match: an id is a user id such as @you:" in fails

    path = config(tmp_path, telegram={"token": TOKEN, "base_url": url, "allowlist": ["@bob", 42]})
    fails = "\n".join(lines(doctor(path), "FAIL"))
    assert "telegram.allowlist: '@bob' cannot match" in fails and "'42'" not in fails


def test_a_config_with_secrets_others_can_read_is_fixed(tmp_path: Path) -> None:
    path = config(tmp_path)
    path.chmod(0o644)
    before = doctor(path)
    assert f"FAIL  config     {path} holds secrets and others can read it (mode 644)" in (
        before.stdout
    )
    fixed = doctor(path, "--fix")
    assert f"fix   config     {path}: mode 644 -> 600 (it holds secrets)" in fixed.stdout
    assert path.stat().st_mode & 0o777 == 0o600
    assert not any("config" in line for line in lines(doctor(path), "FAIL"))


def test_missing_folders_are_made_by_fix(tmp_path: Path) -> None:
    path = config(tmp_path)
    before = doctor(path)
    assert f"note  state      {tmp_path / 'state'} does not exist yet" in before.stdout
    assert f"note  workspace  {tmp_path / 'ws'} does not exist yet" in before.stdout
    assert not (tmp_path / "state").exists()  # looking changes nothing
    fixed = doctor(path, "--fix")
    assert f"fix   state      made {tmp_path / 'state'}" in fixed.stdout
    assert (tmp_path / "state").is_dir() and (tmp_path / "ws").is_dir()
    assert "ok    store" in fixed.stdout


def test_a_taken_health_port_and_a_running_daemon(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = config(tmp_path, health={"listen": f"127.0.0.1:{port}"})
        done = doctor(path, "--fix")
    assert f"FAIL  health     health.listen 127.0.0.1:{port}: Address already in use" in (
        done.stdout
    )
    lock = DaemonLock(tmp_path / "state" / "s.db")
    lock.acquire()
    try:
        running = doctor(path)
    finally:
        lock.release()
    assert f"note  daemon     running on this database (pid {os.getpid()})" in running.stdout
    assert not lines(running, "FAIL  health")  # its port is the daemon's


def test_bash_without_a_sandbox_is_pointed_out(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        agent={"workspace": str(tmp_path / "ws"), "approver": {"allow": [{"tool": "bash"}]}},
    )
    said = doctor(path).stdout
    assert "warn  sandbox    none, and bash is allowed without asking" in said
    assert "ok    sandbox" not in said  # never shown as fine
    asked = config(tmp_path, agent={"workspace": str(tmp_path / "ws")})
    assert "ok    sandbox    none: bash, when allowed" in doctor(asked).stdout


def test_a_rejected_token_and_an_unreachable_server_name_the_key(tmp_path: Path) -> None:
    fake = FakeTelegram(token="111111:some-other-bot-token-entirely-xx").start()
    try:
        path = config(
            tmp_path,
            telegram={"token": TOKEN, "base_url": fake.url, "allowlist": [42]},
            matrix={
                "homeserver_url": f"http://127.0.0.1:{free_port()}",
                "user_id": "@bot:example.org",
                "access_token": "syt_doctorSECRET",
                "allowlist": ["@me:example.org"],
            },
        )
        done = doctor(path, "--fix")
    finally:
        fake.stop()
    fails = "\n".join(lines(done, "FAIL"))
    assert "telegram.token" in fails
    assert "matrix" in fails and "127.0.0.1" in fails


def test_the_routing_table_is_checked(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    path = config(
        tmp_path,
        telegram={"token": TOKEN, "base_url": url, "allowlist": [42]},
        agents={
            "family": {"workspace": str(tmp_path / "ws" / "family"), "tools": ["read", "bsh"]},
            "work": {"workspace": str(tmp_path / "work")},
        },
        routes=[
            {"transport": "slack", "agent": "work"},
            {"transport": "telegram", "agent": "family"},
            {"transport": "telegram", "chat": "-100", "agent": "work"},
        ],
    )
    done = doctor(path)
    fails = lines(done, "FAIL")
    assert done.returncode == 1
    assert [f for f in fails if "routes[" in f] == [
        "FAIL  routes     routes[0] can never match: no transport slack",
        "FAIL  routes     routes[2] can never match: routes[1] takes it all",
    ]
    [overlap] = [f for f in fails if "overlap" in f]
    assert "agents default and family overlap in their workspaces" in overlap
    [tool] = [f for f in fails if "no such tool" in f]
    assert "agent family: tools names 'bsh', no such tool" in tool


def test_unpriced_models_an_unowned_budget_and_a_missing_voice_file(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        openai={"api_key": "sk-doctorSECRET", "model": "my-finetune", "max_retries": 0},
        prices={"my-other-finetune": {"input": 1.0, "output": 2.0}},
        agent={
            "workspace": str(tmp_path / "ws"),
            "budget": {"daily_usd": 5.0},
            "models": {"cron": "gpt-4.1-mini", "heartbeat": "openai:my-other-finetune"},
        },
        speech={"engine": "piper", "voice": str(tmp_path / "nowhere.onnx")},
    )
    done = doctor(path)
    warned = "\n".join(lines(done, "warn"))
    assert "agent: its model my-finetune has no price: its calls count as zero" in warned
    assert "gpt-4.1-mini" not in warned and "my-other-finetune" not in warned  # both priced
    assert "agent.budget: nobody is told when it is reached" in warned
    fails = "\n".join(lines(done, "FAIL"))
    if importlib.util.find_spec("piper") is None or importlib.util.find_spec("av") is None:
        assert "missing: pip install 'rousseau[voice-local]'" in fails
    else:
        assert f"speech.voice: no {tmp_path / 'nowhere.onnx'}" in fails
