"""External MCP servers' tools in agent turns: named SERVER__TOOL, approved like any tool,
a server that fails to start skipped, a dead one reconnected."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Options, PatternApprover, PatternRule, Request, Response, Session
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import MCPServerConfig
from rousseau.mcp.client import mcp_tools
from rousseau.tools import Registry

pytestmark = pytest.mark.anyio
pytest.importorskip("mcp", reason="the mcp extra is not installed")
TINY = MCPServerConfig(command=sys.executable, args=[str(Path(__file__).parent / "tiny_server.py")])
BROKEN = MCPServerConfig(command="/nonexistent/mcp-server")


def calling(name: str, **input: object) -> FunctionProvider:
    """A model that calls one tool, then repeats what the tool said."""

    def answer(request: Request) -> Response:
        last = request.messages[-1]
        if last.tool_results:
            result = last.tool_results[0]
            return text_reply(("ERROR " if result.is_error else "") + result.content)
        return tool_reply(name, **input)

    return FunctionProvider(answer)


def agent(provider: FunctionProvider, registry: Registry, allow: str) -> Agent:
    approver = PatternApprover(allow=[PatternRule(tool=allow)], reason="not allowed")
    return Agent(provider, registry, Options(approver=approver))


async def test_an_external_tool_is_called_through_the_approver() -> None:
    registry = Registry()
    with capture_logs() as logs:
        async with mcp_tools({"tiny": TINY, "broken": BROKEN}, registry) as connections:
            assert {"tiny__shout", "tiny__die", "tiny__count"} <= set(registry.names())
            assert [c.connected for c in connections] == [True, False]

            allowed = agent(calling("tiny__shout", text="hello"), registry, "tiny__shout")
            reply = await allowed.reply(Session(id="a"), "shout hello")
            assert reply.message.text == "HELLO!"

            denied = agent(calling("tiny__shout", text="hello"), registry, "read")
            reply = await denied.reply(Session(id="b"), "shout hello")
            assert reply.message.text == "ERROR denied: not allowed"

            bad = agent(calling("tiny__shout", words="hello"), registry, "tiny__shout")
            reply = await bad.reply(Session(id="c"), "shout")
            assert reply.message.text.startswith("ERROR invalid input for tiny__shout")
    failed = [e for e in logs if e["event"] == "mcp.server_failed"]
    assert failed and failed[0]["server"] == "broken"


async def test_a_dead_server_is_reconnected() -> None:
    registry = Registry()
    async with mcp_tools({"tiny": TINY}, registry) as [connection]:
        count = registry.get("tiny__count")
        first = await count.execute({}, None)  # type: ignore[arg-type]
        died = await registry.get("tiny__die").execute({}, None)  # type: ignore[arg-type]
        assert died.is_error and "tiny failed" in died.content
        with anyio.fail_after(20):
            while True:  # errors while it is away, then the new process answers
                again = await registry.get("tiny__count").execute({}, None)  # type: ignore[arg-type]
                if not again.is_error:
                    break
                assert "tiny" in again.content
                await anyio.sleep(0.1)
        assert connection.connected
    assert not again.is_error and again.content.startswith("1 calls")
    assert again.content.split("pid ")[1] != first.content.split("pid ")[1]


async def test_the_daemon_connects_configured_servers(tmp_path: Path) -> None:
    from rousseau.config import load_config
    from rousseau.transports.base import MemoryTransport
    from tests.helpers import serving

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "mcp_servers:\n"
        f"  tiny: {{command: {sys.executable}, args: [{TINY.args[0]}]}}\n"
        "agent:\n  approver: {mode: pattern, allow: [{tool: tiny__shout}]}\n"
    )
    config = load_config(
        str(config_file),
        {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")},
    )
    memory = MemoryTransport()
    provider = calling("tiny__shout", text="from the daemon")
    async with serving(memory, config, provider, ["user"]):
        await memory.inject("shout please")
        with anyio.fail_after(30):
            [sent] = await memory.wait_sent(1)
    assert sent.text == "FROM THE DAEMON!"


async def test_a_streamable_http_server_with_headers() -> None:
    import uvicorn

    from tests.mcp.remote_server import remote

    app = remote.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        config = MCPServerConfig(
            url=f"http://127.0.0.1:{port}/mcp", headers={"Authorization": "Bearer test-token"}
        )
        registry = Registry()
        async with mcp_tools({"remote": config}, registry):
            said = await registry.get("remote__whoami").execute({}, None)  # type: ignore[arg-type]
        server.should_exit = True
    assert not said.is_error and said.content == "Bearer test-token"


async def test_a_reload_that_changes_the_servers_restarts_them(tmp_path: Path) -> None:
    from rousseau.config import load_config
    from rousseau.transports.base import MemoryTransport
    from tests.helpers import serving

    def servers(name: str) -> str:
        return (
            f"mcp_servers:\n  {name}: {{command: {sys.executable}, args: [{TINY.args[0]}]}}\n"
            f"agent:\n  approver: {{mode: pattern, allow: [{{tool: {name}__shout}}]}}\n"
        )

    config_file = tmp_path / "config.yaml"
    config_file.write_text(servers("tiny"))
    config = load_config(
        str(config_file),
        {"HOME": str(tmp_path), "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db")},
    )
    memory = MemoryTransport()
    provider = calling("other__shout", text="from the new server")
    async with serving(memory, config, provider, ["user"]) as daemon:
        assert daemon.parts is not None
        assert "tiny__shout" in daemon.parts.registries[0].names()
        config_file.write_text(servers("other"))
        assert await daemon.reload()
        names = daemon.parts.registries[0].names()
        assert "tiny__shout" not in names and "other__shout" in names
        await memory.inject("shout please")
        with anyio.fail_after(30):
            [sent] = await memory.wait_sent(1)
    assert sent.text == "FROM THE NEW SERVER!"
