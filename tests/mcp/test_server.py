"""`rousseau mcp` driven by the official MCP client SDK over stdio, as an MCP host would."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rousseau.agent import Message
from rousseau.cron import CronJobs
from rousseau.state import Store
from rousseau.state.sqlite_cron import SqliteCronJobs
from tests.helpers import ROUSSEAU

pytestmark = pytest.mark.anyio
mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")


@asynccontextmanager
async def connect(tmp: Path, protocol: str | None = None) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    config = tmp / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "state": {"path": str(tmp / "s.db")},
                "agent": {
                    "workspace": str(tmp / "ws"),
                    "approver": {
                        "mode": "pattern",
                        "allow": [{"tool": "read"}, {"tool": "write"}],
                        "deny": [{"tool": "bash", "match": "rm "}],
                        "reason": "not on this machine",
                    },
                },
            }
        )
    )
    command, *args = ROUSSEAU
    params = StdioServerParameters(
        command=command,
        args=[*args, "--config", str(config), "mcp"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp)},
    )
    with tempfile.TemporaryFile("w+") as errors:
        async with stdio_client(params, errlog=errors) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=30) as session:
                yield session


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


async def test_lists_tools_reads_and_reports_errors_as_results(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("hello from the workspace\n")
    async with connect(tmp_path) as session:
        init = await session.initialize()
        assert init.server_info.name == "rousseau"
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"read", "write", "edit", "grep", "bash"} <= names
        assert {
            "rousseau_search_sessions",
            "rousseau_list_sessions",
            "rousseau_read_session",
            "rousseau_cron_list",
        } <= names

        read = await session.call_tool("read", {"path": "notes.md"})
        assert not read.is_error and "hello from the workspace" in text(read)

        missing = await session.call_tool("read", {"path": "nope.md"})
        assert missing.is_error and "nope.md" in text(missing)

        denied = await session.call_tool("bash", {"command": "rm -rf /tmp/x"})
        assert denied.is_error and "denied: not on this machine" in text(denied)

        unlisted = await session.call_tool(
            "edit", {"path": "notes.md", "old_string": "hello", "new_string": "bye"}
        )
        assert unlisted.is_error and "denied" in text(unlisted)  # no rule allows it

        bad = await session.call_tool("read", {"file": "notes.md"})
        assert bad.is_error and "invalid input for read" in text(bad)

        unknown = await session.call_tool("teleport", {})
        assert unknown.is_error


async def test_store_tools(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        store.append_message_sync("abc123", Message.user("the marmot hibernates in winter"))
        store.append_message_sync("abc123", Message.assistant("noted"))
        await CronJobs(SqliteCronJobs(store)).add(
            "digest", "@daily", "digest", "telegram:42", timezone="UTC"
        )
    async with connect(tmp_path) as session:
        await session.initialize()
        found = json.loads(
            text(await session.call_tool("rousseau_search_sessions", {"query": "marmot"}))
        )
        assert found[0]["session"] == "abc123" and "marmot" in found[0]["text"]
        listed = json.loads(text(await session.call_tool("rousseau_list_sessions", {"limit": 5})))
        assert listed[0]["id"] == "abc123" and listed[0]["messages"] == 2
        read = json.loads(text(await session.call_tool("rousseau_read_session", {"id": "abc123"})))
        assert [m["role"] for m in read] == ["user", "assistant"]
        gone = await session.call_tool("rousseau_read_session", {"id": "zzz"})
        assert gone.is_error
        cron = text(await session.call_tool("rousseau_cron_list", {}))
        assert cron.startswith("digest  [@daily]") and "telegram:42" in cron


async def test_older_protocol_revisions_are_spoken(tmp_path: Path) -> None:
    """A host that still speaks 2024-11-05 is answered in 2024-11-05."""
    import anyio

    command, *args = ROUSSEAU
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": {"path": str(tmp_path / "s.db")}}))
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "old-host", "version": "1"},
        },
    }
    done = await anyio.run_process(
        [command, *args, "--config", str(config), "mcp"],
        input=(json.dumps(request) + "\n").encode(),
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        check=False,
    )
    reply = json.loads(done.stdout.decode().splitlines()[0])
    assert reply["result"]["protocolVersion"] == "2024-11-05"
    assert reply["result"]["serverInfo"]["name"] == "rousseau"
