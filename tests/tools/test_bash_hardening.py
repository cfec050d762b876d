"""bash cannot read the environment (or memory) of the process that runs it.

Non-dumpable is a property of a whole process, so these tests run the bash tool in a real
child process (a script, then `rousseau mcp` as a host runs it) and never change pytest's.
Run as root, the script starts without the capabilities that open any process of the same
user (as a root daemon with a capability bounding set would): then, as for any other user,
only its being non-dumpable keeps bash out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROUSSEAU

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and prctl are Linux's")

# Every environ bash can read, the runner's own and its parent's first; then how many
# processes it can see hold the secret.
PROBE = (
    "cat /proc/{pid}/environ; echo; cat /proc/$PPID/environ; echo;"
    " cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -ac {marker}; true"
)

RUNNER = """
import os, sys, anyio
from rousseau.agent import ToolCall
from rousseau.tools import BashTool, Workspace

workspace, marker, hardened = sys.argv[1], sys.argv[2], sys.argv[3] == "yes"
if hardened:
    from rousseau.tools.hardening import make_undumpable
    assert make_undumpable()
tool = BashTool(Workspace(workspace))
command = sys.argv[4].format(pid=os.getpid(), marker=marker)
out = anyio.run(tool.execute, {"command": command}, ToolCall(session_id="s", tool_use_id="t"))
print(out.content)
"""


INSPECTION = "-sys_ptrace,-sys_admin,-perfmon"


def run_tool(tmp_path: Path, hardened: bool) -> tuple[str, str]:
    marker = f"m{uuid.uuid4().hex}"
    env = {**os.environ, "ROUSSEAU_TELEGRAM_TOKEN": marker, "PYTHONPATH": str(Path.cwd())}
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, this needs setpriv (util-linux) to start without CAP_SYS_PTRACE")
        prefix = ["setpriv", f"--bounding-set={INSPECTION}", "--inh-caps=-all"]
    args = [str(tmp_path), marker, "yes" if hardened else "no", PROBE]
    done = subprocess.run(
        [*prefix, sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return marker, done.stdout


def test_the_probe_finds_the_secret_in_an_unhardened_process(tmp_path: Path) -> None:
    """The control: without the hardening, bash reads the token from its runner."""
    marker, output = run_tool(tmp_path, hardened=False)
    assert marker in output


def test_bash_cannot_read_the_environment_of_its_runner(tmp_path: Path) -> None:
    marker, output = run_tool(tmp_path, hardened=True)
    assert marker not in output
    assert output.splitlines()[-1] == "0"


def test_run_by_root_bash_lacks_the_capabilities_that_open_any_process(tmp_path: Path) -> None:
    """Root may read even a non-dumpable process with CAP_SYS_PTRACE (on some kernels
    CAP_SYS_ADMIN or CAP_PERFMON); bash never has them."""
    if os.geteuid() != 0:
        pytest.skip("only root has them to give up")
    from rousseau.tools import hardening

    done = subprocess.run(
        hardening.launcher(["/bin/sh", "-c", "grep -E '^Cap(Eff|Bnd|Inh):' /proc/self/status"]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    sets = [int(line.split()[1], 16) for line in done.stdout.splitlines()]
    assert len(sets) == 3
    for caps in sets:
        for cap in hardening.INSPECTION_CAPS:
            assert not caps & (1 << cap), f"capability {cap} kept"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_rousseau_mcp_is_hardened(tmp_path: Path) -> None:
    """The call site: `rousseau mcp` (as run and chat) makes itself non-dumpable as it
    builds its tools."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp import ClientSession, StdioServerParameters, stdio_client

    marker = f"m{uuid.uuid4().hex}"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp_path / "s.db")},
                "agent": {"workspace": str(tmp_path / "ws"), "approver": {"mode": "allow_all"}},
            }
        )
    )
    command, *args = ROUSSEAU
    params = StdioServerParameters(
        command=command,
        args=[*args, "--config", str(config), "mcp"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANTHROPIC_API_KEY": marker},
    )
    probe = PROBE.format(pid="$(awk '/^PPid:/{print $2}' /proc/$PPID/status)", marker=marker)
    with tempfile.TemporaryFile("w+") as errors:
        async with stdio_client(params, errlog=errors) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=30) as session:
                await session.initialize()
                result = await session.call_tool("bash", {"command": probe})
    output = "".join(c.text for c in result.content)  # type: ignore[union-attr]
    assert marker not in output
    assert output.splitlines()[-1] == "0"
