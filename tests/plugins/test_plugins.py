"""Plugins: found by their entry points, configured by their own sections, served as the
built-ins are, and a broken one stops only itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rousseau.agent import ConfigError, Request, Response
from rousseau.agent.testing import FunctionProvider, text_reply, tool_reply
from rousseau.config import load_config
from rousseau.daemon import Daemon
from rousseau.plugins import installed
from tests.fakes.linechat import TOKEN, FakeLinechat
from tests.transports.harness_linechat import example_plugin

ROOT = Path(__file__).resolve().parent.parent.parent


def dist(site: Path, name: str, group: str, entries: dict[str, str], module: str) -> None:
    """An installed package in `site`: its metadata, its entry points in `group`, and its
    one module (as source text)."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")
    (site / f"{name.replace('-', '_')}.py").write_text(textwrap.dedent(module))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of packages on sys.path, as if installed beside rousseau."""
    folder = tmp_path / "site"
    folder.mkdir()
    dist(
        folder,
        "broken-plugin",
        "rousseau.transports",
        {"broken": "broken_plugin:plugin"},
        "raise ImportError('the SDK this plugin needs is missing')\n",
    )
    dist(
        folder,
        "old-plugin",
        "rousseau.tools",
        {"oldtool": "old_plugin:plugin"},
        """
        from rousseau.plugins import ToolPlugin
        plugin = ToolPlugin(build=lambda section, context: [], api=0)
        """,
    )
    dist(
        folder,
        "canned-provider",
        "rousseau.providers",
        {"canned": "canned_provider:plugin"},
        """
        from pydantic import BaseModel
        from rousseau.agent.testing import FunctionProvider, text_reply
        from rousseau.plugins import ProviderPlugin

        class Canned(BaseModel):
            model: str = "canned-1"

        def build(section):
            return FunctionProvider(lambda request: text_reply(f"{section.model} says hi"))

        plugin = ProviderPlugin(config=Canned, build=build)
        """,
    )
    monkeypatch.syspath_prepend(str(folder))
    installed.cache_clear()
    yield folder
    installed.cache_clear()
    for name in ("broken_plugin", "old_plugin", "canned_provider"):
        sys.modules.pop(name, None)


def config_file(tmp: Path, text: str) -> Path:
    path = tmp / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rousseau", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_plugins_list_shows_what_is_installed_and_what_failed(site: Path, tmp_path: Path) -> None:
    example_plugin("linechat")
    config = config_file(tmp_path, "textkit: {unit: characters}\n")
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    listed = cli("--config", str(config), "plugins", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["linechat"]["kind"] == "transport" and rows["linechat"]["loaded"]
    assert rows["linechat"]["package"] == "rousseau-example-plugin"
    assert rows["textkit"]["configured"] and not rows["linechat"]["configured"]
    assert not rows["broken"]["loaded"]
    assert "the SDK this plugin needs is missing" in rows["broken"]["error"]
    assert "plugin API 0" in rows["oldtool"]["error"]
    assert rows["canned"]["kind"] == "provider" and rows["canned"]["loaded"]
    text = cli("--config", str(config), "plugins", "list", env=env)
    lines = text.stdout.splitlines()
    assert any(line.startswith("broken") and "failed: cannot import" in line for line in lines)
    assert any(line.startswith("linechat") and "loaded; not configured" in line for line in lines)


def test_a_plugin_section_is_validated_by_its_own_model(tmp_path: Path) -> None:
    example_plugin("linechat")
    path = config_file(tmp_path, "linechat:\n  address: 127.0.0.1:1\n  allowlst: [alice]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {"HOME": str(tmp_path)})
    message = str(caught.value)
    assert "linechat.token: Field required" in message
    assert "linechat.allowlst: unknown key; did you mean allowlist?" in message
    path = config_file(tmp_path, "nosuchthing: {}\n")
    with pytest.raises(ConfigError, match="nosuchthing: unknown key"):
        load_config(str(path), {"HOME": str(tmp_path)})


def test_a_provider_plugin_is_chosen_by_name(site: Path, tmp_path: Path) -> None:
    from rousseau.providers import build_provider

    path = config_file(tmp_path, "provider: canned\ncanned: {model: canned-7}\n")
    config = load_config(str(path), {"HOME": str(tmp_path)})
    provider = build_provider(config)
    reply = anyio.run(provider.complete, Request(session_id="s", messages=[], system=""))
    assert reply.message.text == "canned-7 says hi"
    path = config_file(tmp_path, "provider: nosuch\n")
    with pytest.raises(ConfigError, match="provider: Input should be 'anthropic'"):
        load_config(str(path), {"HOME": str(tmp_path)})


@pytest.mark.anyio
async def test_a_broken_plugin_stops_only_itself_and_a_plugin_tool_reaches_the_model(
    site: Path, tmp_path: Path
) -> None:
    example_plugin("linechat")
    server = FakeLinechat().start()
    path = config_file(
        tmp_path,
        f"""
        linechat:
          address: {server.address}
          token: {TOKEN}
          allowlist: [alice]
        broken: {{}}
        textkit: {{unit: words}}
        agent:
          approver:
            allow: [{{tool: count_words}}]  # a plugin's tools pass the approver as any
        """,
    )
    env = {
        "HOME": str(tmp_path),
        "ROUSSEAU_STATE_PATH": str(tmp_path / "s.db"),
        "ROUSSEAU_AGENT_WORKSPACE": str(tmp_path / "ws"),
    }
    config = load_config(str(path), env)
    assert config.plugins["broken"].plugin is None

    def answer(request: Request) -> Response:
        if request.messages[-1].tool_results:
            return text_reply(f"the tool says {request.messages[-1].tool_results[0].content}")
        assert "count_words" in [t.name for t in request.tools]
        return tool_reply("count_words", text="one two three four")

    provider = FunctionProvider(answer)
    with capture_logs() as logs:
        daemon = Daemon(config, provider=provider)
        assert sorted(daemon.transports) == ["linechat"]
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(daemon.run)
                await anyio.to_thread.run_sync(
                    server.deliver, {"chat": "dm-alice", "sender": "alice", "text": "count"}
                )
                with anyio.fail_after(20):
                    while not server.sent:
                        await anyio.sleep(0.05)
                daemon.stop()
        finally:
            server.stop()
    assert server.sent[0]["text"] == "the tool says 4 words"
    failed = [e for e in logs if e["event"] == "plugins.failed"]
    assert [e["plugin"] for e in failed] == ["broken"]
    assert "the SDK this plugin needs is missing" in failed[0]["error"]


def test_the_doctor_knows_the_built_in_and_the_plugins_tools(tmp_path: Path) -> None:
    example_plugin("textkit")
    config = config_file(
        tmp_path,
        f"""\
        textkit: {{unit: words}}
        state: {{path: {tmp_path / "s.db"}}}
        agent:
          workspace: {tmp_path / "ws"}
          tools: [count_words, web_fetch, memory, delegate, count_lines]
        """,
    )
    done = cli("--config", str(config), "doctor", env={"HOME": str(tmp_path)})
    unknown = [line for line in done.stdout.splitlines() if "no such tool" in line]
    assert unknown == ["FAIL  agents     agent default: tools names 'count_lines', no such tool"]
