"""The five built-ins: their limits, their errors and every way out of the workspace."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rousseau.agent import ToolCall, ToolNotFoundError, ToolOutput
from rousseau.tools import (
    DuplicateToolError,
    Registry,
    Workspace,
    builtin_registry,
    scrubbed_environ,
)
from rousseau.tools.bash import BashTool
from rousseau.tools.grep import MAX_MATCHES
from rousseau.tools.read import MAX_OUTPUT

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")


@pytest.fixture
def tools(ws: Path) -> Registry:
    return builtin_registry(ws, bash_timeout=10)


async def run(tools: Registry, name: str, **input: Any) -> ToolOutput:
    tool = tools.get(name)
    problem = tool.validate(input)
    assert problem is None, problem
    return await tool.execute(input, CALL)


# -- registry ---------------------------------------------------------------------------------


def test_registry_rejects_duplicates_and_unknown_names(tools: Registry) -> None:
    assert tools.names() == ["bash", "edit", "grep", "read", "write"]
    with pytest.raises(DuplicateToolError):
        tools.register(tools.get("read"))
    with pytest.raises(ToolNotFoundError, match="agent: tool not found: nope"):
        tools.get("nope")
    definitions = {d.name: d for d in tools.definitions()}
    assert definitions["edit"].input_schema["required"] == ["path", "old_string", "new_string"]


def test_registry_is_thread_safe(ws: Path) -> None:
    from rousseau.tools import ReadTool

    registry = Registry()
    errors: list[BaseException] = []

    class Named(ReadTool):
        pass

    def worker(i: int) -> None:
        try:
            for j in range(50):
                tool = Named(Workspace(ws))
                tool.name = f"t{i}_{j}"  # type: ignore[misc]
                registry.register(tool)
                registry.definitions()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(registry) == 400


def test_schema_validation_names_the_problem(tools: Registry) -> None:
    assert tools.get("read").validate({}) == "'path' is a required property"
    assert "offset: 0 is less than the minimum of 1" in (
        tools.get("read").validate({"path": "a", "offset": 0}) or ""
    )
    assert "is not of type 'integer'" in (
        tools.get("bash").validate({"command": "ls", "timeout": "soon"}) or ""
    )
    assert "Additional properties" in (tools.get("grep").validate({"pattern": "x", "x": 1}) or "")


# -- workspace escapes ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["read", "write", "edit"])
async def test_dotdot_escape_is_refused(tools: Registry, ws: Path, name: str) -> None:
    (ws.parent / "secret.txt").write_text("top secret")
    input: dict[str, Any] = {"path": "../secret.txt"}
    if name == "write":
        input["content"] = "x"
    if name == "edit":
        input.update(old_string="top", new_string="no")
    out = await tools.get(name).execute(input, CALL)
    assert out.is_error and "outside the workspace" in out.content
    assert (ws.parent / "secret.txt").read_text() == "top secret"


async def test_absolute_path_outside_is_refused(tools: Registry, ws: Path) -> None:
    out = await run(tools, "read", path="/etc/hostname")
    assert out.is_error and "outside the workspace" in out.content
    out = await run(tools, "write", path="/tmp/rousseau-escape-test", content="x")
    assert out.is_error and not Path("/tmp/rousseau-escape-test").exists()


async def test_absolute_path_inside_is_fine(tools: Registry, ws: Path) -> None:
    (ws / "a.txt").write_text("inside\n")
    out = await run(tools, "read", path=str(ws / "a.txt"))
    assert not out.is_error and "inside" in out.content


async def test_symlink_out_is_refused(tools: Registry, ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    (outside / "key.pem").write_text("PRIVATE")
    (ws / "link").symlink_to(outside)
    (ws / "file-link").symlink_to(outside / "key.pem")
    for path in ("link/key.pem", "file-link"):
        out = await run(tools, "read", path=path)
        assert out.is_error and "outside the workspace" in out.content
    out = await run(tools, "write", path="link/new.txt", content="x")
    assert out.is_error and not (outside / "new.txt").exists()
    out = await run(tools, "grep", pattern="PRIVATE")
    assert out.content == "no matches"
    out = await run(tools, "grep", pattern="PRIVATE", path="link")
    assert out.is_error


async def test_symlink_inside_is_followed(tools: Registry, ws: Path) -> None:
    (ws / "real.txt").write_text("hello\n")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    out = await run(tools, "read", path="alias.txt")
    assert "hello" in out.content and not out.is_error


# -- read -------------------------------------------------------------------------------------


async def test_read_numbers_lines_and_pages(tools: Registry, ws: Path) -> None:
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await run(tools, "read", path="f.txt", offset=3, limit=2)
    assert out.content == "     3\tline 3\n     4\tline 4\n"
    out = await run(tools, "read", path="f.txt", offset=50)
    assert "fewer than 50 lines" in out.content


async def test_read_caps_output_at_200kb(tools: Registry, ws: Path) -> None:
    (ws / "big.txt").write_text("x" * 99 + "\n" * 1 + ("y" * 99 + "\n") * 5000)
    out = await run(tools, "read", path="big.txt")
    assert len(out.content.encode()) <= MAX_OUTPUT + 200
    assert "[output capped at 200 KB; continue with offset=" in out.content


async def test_read_refuses_binary_and_missing(tools: Registry, ws: Path) -> None:
    (ws / "bin").write_bytes(b"\x7fELF\x00\x01\x02")
    out = await run(tools, "read", path="bin")
    assert out.is_error and "binary" in out.content
    out = await run(tools, "read", path="missing.txt")
    assert out.is_error and "no such file" in out.content


# -- write and edit ---------------------------------------------------------------------------


async def test_write_creates_parents(tools: Registry, ws: Path) -> None:
    out = await run(tools, "write", path="a/b/c.txt", content="héllo")
    assert not out.is_error
    assert (ws / "a/b/c.txt").read_text(encoding="utf-8") == "héllo"


async def test_edit_requires_exactly_one_occurrence(tools: Registry, ws: Path) -> None:
    f = ws / "e.py"
    f.write_text("a = 1\nb = 1\n")
    out = await run(tools, "edit", path="e.py", old_string="= 1", new_string="= 2")
    assert out.is_error and "occurs 2 times" in out.content
    out = await run(tools, "edit", path="e.py", old_string="c = 1", new_string="c = 2")
    assert out.is_error and "not found" in out.content
    out = await run(tools, "edit", path="e.py", old_string="a = 1", new_string="a = 1")
    assert out.is_error and "the same" in out.content
    assert f.read_text() == "a = 1\nb = 1\n"
    out = await run(tools, "edit", path="e.py", old_string="b = 1", new_string="b = 3")
    assert not out.is_error and f.read_text() == "a = 1\nb = 3\n"


async def test_edit_keeps_crlf_line_endings(tools: Registry, ws: Path) -> None:
    f = ws / "w.txt"
    f.write_bytes(b"one\r\ntwo\r\n")
    await run(tools, "edit", path="w.txt", old_string="two", new_string="three")
    assert f.read_bytes() == b"one\r\nthree\r\n"


# -- grep -------------------------------------------------------------------------------------


async def test_grep_finds_filters_and_skips(tools: Registry, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src/a.py").write_text("import os\nTODO: fix\n")
    (ws / "src/b.txt").write_text("todo later\n")
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("TODO in git\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules/x.js").write_text("TODO in deps\n")
    (ws / "blob.bin").write_bytes(b"TODO\x00binary")
    (ws / "huge.txt").write_bytes(b"TODO\n" + b"x" * (4 * 1024 * 1024 + 1))
    out = await run(tools, "grep", pattern="TODO")
    assert out.content == "src/a.py:2:TODO: fix"
    out = await run(tools, "grep", pattern="todo", ignore_case=True, include="*.txt")
    assert out.content == "src/b.txt:1:todo later"
    out = await run(tools, "grep", pattern="import", path="src/a.py")
    assert out.content == "src/a.py:1:import os"


async def test_grep_caps_matches_and_reports_bad_regex(tools: Registry, ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * (MAX_MATCHES + 50))
    out = await run(tools, "grep", pattern="hit")
    lines = out.content.splitlines()
    assert len(lines) == MAX_MATCHES + 1 and "stopped at 200 matches" in lines[-1]
    out = await run(tools, "grep", pattern="(")
    assert out.is_error and "invalid pattern" in out.content


# -- bash -------------------------------------------------------------------------------------


async def test_bash_runs_in_workspace_and_reports_exit_code(tools: Registry, ws: Path) -> None:
    out = await run(tools, "bash", command="pwd; echo oops >&2; exit 3")
    assert out.is_error
    assert out.content.splitlines()[0] == str(ws.resolve())
    assert "oops" in out.content and "[exit code 3]" in out.content


async def test_bash_timeout_kills_the_whole_process_group(tools: Registry, ws: Path) -> None:
    marker = ws / "survived"
    started = time.monotonic()
    out = await run(tools, "bash", command=f"(sleep 3; touch {marker}) & sleep 30", timeout=1)
    assert time.monotonic() - started < 10
    assert out.is_error and "timed out after 1 s" in out.content
    await anyio.sleep(3.5)
    assert not marker.exists(), "a child of the timed-out command kept running"


async def test_bash_output_is_capped_head_and_tail(ws: Path) -> None:
    tool = BashTool(Workspace(ws), max_output=1000)
    out = await tool.execute({"command": "seq 1 100000"}, CALL)
    assert out.content.startswith("1\n2\n3\n")
    assert out.content.endswith("99999\n100000")
    assert "bytes of output omitted" in out.content
    assert len(out.content) < 1200


async def test_bash_environment_has_no_secrets(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    monkeypatch.setenv("ROUSSEAU_OPENAI_BASE_URL", "http://x")
    monkeypatch.setenv("INNOCENT", "configured-secret-value")
    monkeypatch.setenv("EDITOR", "vi")
    tools = builtin_registry(ws, secrets=["configured-secret-value"])
    out = await run(tools, "bash", command="env")
    assert "EDITOR=vi" in out.content
    for leaked in ("sk-ant", "123:abc", "ROUSSEAU_", "configured-secret-value", "INNOCENT"):
        assert leaked not in out.content


def test_scrubbed_environ_rules() -> None:
    env = {
        "PATH": "/bin",
        "GITHUB_TOKEN": "x",
        "db_password": "y",
        "AWS_SECRET_ACCESS_KEY": "z",
        "MY_VAR": "s3cr3t-value",
    }
    assert scrubbed_environ(env, secrets=["s3cr3t-value"]) == {"PATH": "/bin"}


async def test_bash_background_process_does_not_hang_the_call(tools: Registry) -> None:
    started = time.monotonic()
    out = await run(tools, "bash", command="sleep 20 & echo started")
    assert out.content == "started"
    assert time.monotonic() - started < 5


def test_workspace_rejects_nul(ws: Path) -> None:
    with pytest.raises(ValueError):
        Workspace(ws).resolve("a\x00b")
    assert os.path.isdir(Workspace(ws).root)
