"""bash in bubblewrap: only the workspace is writable, home and the state database are not
there, the network is off unless allowed, and processes are capped. Skipped, with the
reason, where bwrap cannot run (CI installs bubblewrap)."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.agent import ToolCall
from rousseau.tools import BashTool, Sandbox, SandboxError, Workspace
from tests.helpers import unavailable

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")


def usable(sandbox: Sandbox, workspace: Path) -> None:
    try:
        sandbox.check(workspace)
    except SandboxError as exc:
        unavailable(f"bwrap cannot run on this machine: {exc}")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with a state database, a secret and the workspace inside it."""
    (tmp_path / "workspace").mkdir()
    (tmp_path / "state.db").write_text("SQLite format 3 ... every conversation")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    return tmp_path


def bash(home: Path, **options: object) -> BashTool:
    sandbox = Sandbox(hidden=(home / "workspace" / "sessions.db",), **options)  # type: ignore[arg-type]
    usable(sandbox, home / "workspace")
    return BashTool(Workspace(home / "workspace"), sandbox=sandbox, env={"PATH": "/usr/bin:/bin"})


async def run(tool: BashTool, command: str, seconds: int = 20) -> tuple[bool, str]:
    out = await tool.execute({"command": command, "timeout": seconds}, CALL)
    return out.is_error, out.content


async def test_the_workspace_is_writable(home: Path) -> None:
    failed, text = await run(bash(home), "echo made > note.txt && cat note.txt && pwd")
    assert not failed and text.splitlines() == ["made", str(home / "workspace")]
    assert (home / "workspace" / "note.txt").read_text() == "made\n"


async def test_nothing_outside_the_workspace_is_writable(home: Path) -> None:
    tool = bash(home)
    for target in (Path("/usr/escaped.txt"), Path("/etc/escaped.txt")):
        failed, _ = await run(tool, f"echo x > {target}")
        assert failed and not target.exists()
    # home is not there: what is written at its path stays in the sandbox's own /tmp
    await run(tool, f"mkdir -p {home} && echo x > {home}/escaped.txt")
    assert not (home / "escaped.txt").exists()
    failed, _ = await run(tool, "echo x > /tmp/private && cat /tmp/private")
    assert not failed and not Path("/tmp/private").exists()  # its own /tmp


def wal_database(path: Path) -> sqlite3.Connection:
    """An open database in WAL mode whose newest rows are only in its -wal file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE messages (text)")
    db.execute("INSERT INTO messages VALUES ('every conversation')")
    db.commit()
    assert b"every conversation" in Path(f"{path}-wal").read_bytes()
    assert Path(f"{path}-shm").exists()
    return db


@pytest.mark.parametrize("where", ["state/sessions.db", "sessions.db"])
async def test_every_file_of_a_database_in_the_workspace_is_masked(home: Path, where: str) -> None:
    """The -wal holds the newest messages and the -shm its index; a -journal written by
    the sandbox would be played back into the database at the next start."""
    path = home / "workspace" / where
    db = wal_database(path)
    try:
        tool = bash(home, databases=(path,))
        for name in (where, f"{where}-wal", f"{where}-shm", f"{where}-journal"):
            _, text = await run(tool, f"cat {name}; echo end")
            assert "every conversation" not in text and text.endswith("end"), name
            await run(tool, f"echo forged > {name}; echo forged >> {name}")
            real = Path(home / "workspace" / name)
            assert not real.exists() or b"forged" not in real.read_bytes(), name
        assert db.execute("SELECT text FROM messages").fetchall() == [("every conversation",)]
    finally:
        db.close()


async def test_files_that_appear_in_the_state_folder_later_are_masked(home: Path) -> None:
    state = home / "workspace" / "state"
    state.mkdir()
    tool = bash(home, databases=(state / "sessions.db",))
    wait = "for i in $(seq 40); do [ -s state/late ] && cat state/late && break; sleep 0.1; done"
    async with anyio.create_task_group() as tg:
        result: list[str] = []

        async def probe() -> None:
            result.append((await run(tool, f"{wait}; echo end"))[1])

        tg.start_soon(probe)
        await anyio.sleep(1)
        (state / "late").write_text("every conversation")
    assert result == ["end"]


async def test_home_and_the_state_database_are_out_of_reach(home: Path) -> None:
    tool = bash(home)
    for secret in (home / "state.db", home / ".ssh" / "id_ed25519"):
        failed, text = await run(tool, f"cat {secret}")
        assert failed and "No such file" in text
    # a database kept inside the workspace is masked too
    (home / "workspace" / "sessions.db").write_text("every conversation")
    failed, text = await run(tool, "cat sessions.db; echo end")
    assert "every conversation" not in text and text.endswith("end")


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


async def test_the_network_is_off_unless_allowed(home: Path, listener: int) -> None:
    probe = f"bash -c 'echo > /dev/tcp/127.0.0.1/{listener}' && echo connected"
    failed, text = await run(bash(home), probe)
    assert failed and "connected" not in text
    failed, text = await run(bash(home, network=True), probe)
    assert not failed and text == "connected"


async def test_processes_are_capped_and_a_fork_bomb_is_contained(home: Path) -> None:
    tool = bash(home, processes=32)
    assert tool.sandbox is not None
    if tool.sandbox.process_limit.startswith("none"):
        pytest.skip(f"no process limit can be set here: {tool.sandbox.process_limit}")
    many = "for i in $(seq 100); do sleep 2 & done && wait && echo all started"
    failed, text = await run(tool, many)
    assert failed and "all started" not in text  # the 33rd process could not start
    failed, text = await run(bash(home, processes=256), many)
    assert not failed and text == "all started"
    started = time.monotonic()
    failed, text = await run(tool, "bash -c 'b(){ b|b& }; b' 2>/dev/null; sleep 30", seconds=3)
    assert failed and "timed out after 3 s" in text
    assert time.monotonic() - started < 15


async def test_cpu_time_is_capped(home: Path) -> None:
    failed, text = await run(bash(home, cpu_seconds=1), "while :; do :; done", seconds=15)
    assert failed and "timed out" not in text  # killed by the CPU limit, not the timeout


async def test_an_escaped_child_is_killed_at_the_timeout(home: Path) -> None:
    marker = home / "workspace" / "survived"
    command = (
        f"setsid sh -c 'touch ready; sleep 2; touch {marker.name}' >/dev/null 2>&1 &\n"
        "while [ ! -e ready ]; do sleep 0.05; done; sleep 30"
    )
    failed, text = await run(bash(home), command, seconds=1)
    assert failed and "timed out after 1 s" in text
    await anyio.sleep(3)
    assert not marker.exists()
