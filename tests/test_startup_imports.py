"""What the daemon imports before its first poll stays what the first poll needs: no provider
SDK (built in a thread while the transports start), no other transport's SDK, nothing only
the command line or the web needs. A new import here fails this test on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BUILD_DAEMON = """
import json, sys
from rousseau.config import load_config
from rousseau.daemon import Daemon
Daemon(load_config(sys.argv[1]))
print(json.dumps(sorted(sys.modules)))
"""

OURS = {
    "rousseau", "rousseau.alerts", "rousseau.agent", "rousseau.agent.approval",
    "rousseau.agent.compress",
    "rousseau.agent.errors", "rousseau.agent.loop", "rousseau.agent.protocols",
    "rousseau.agent.repair", "rousseau.agent.types", "rousseau.agents",
    "rousseau.assembly", "rousseau.assembly.agent", "rousseau.assembly.models",
    "rousseau.assembly.crew", "rousseau.assembly.parts",
    "rousseau.approvals", "rousseau.approvals.chat", "rousseau.approvals.render",
    "rousseau.approvals.shell",
    "rousseau.backoff", "rousseau.config", "rousseau.config.base", "rousseau.config.loading",
    "rousseau.config.providers", "rousseau.config.root", "rousseau.config.sections",
    "rousseau.config.transports", "rousseau.config.web_tools", "rousseau.config_go",
    "rousseau.costs", "rousseau.costs.meter", "rousseau.costs.prices",
    "rousseau.cron",
    "rousseau.cron.jobs", "rousseau.cron.schedule", "rousseau.cron.scheduler",
    "rousseau.cron.targets", "rousseau.cron.tool", "rousseau.daemon", "rousseau.delivery",
    "rousseau.log",
    "rousseau.mcp", "rousseau.mcp.client", "rousseau.media", "rousseau.media.download",
    "rousseau.media.tool", "rousseau.media.transcribe",
    "rousseau.messages",
    "rousseau.metrics", "rousseau.policy", "rousseau.private", "rousseau.process",
    "rousseau.providers", "rousseau.providers.lazy", "rousseau.router",
    "rousseau.router.commands", "rousseau.router.core", "rousseau.router.intake",
    "rousseau.router.replies", "rousseau.router.sessions", "rousseau.router.settings",
    "rousseau.router.sharing", "rousseau.router.slots", "rousseau.router.turns",
    "rousseau.router.voice",
    "rousseau.state",
    "rousseau.state.backend", "rousseau.state.checkpoint", "rousseau.state.cluster",
    "rousseau.state.daemon_state",
    "rousseau.state.lock",
    "rousseau.state.migrations", "rousseau.state.protocol", "rousseau.state.records",
    "rousseau.state.sqlite_cron", "rousseau.state.store", "rousseau.upkeep",
    "rousseau.state.worker", "rousseau.streaming", "rousseau.tools",
    "rousseau.tools.base",
    "rousseau.tools.bash", "rousseau.tools.edit", "rousseau.tools.fs", "rousseau.tools.grep",
    "rousseau.tools.hardening", "rousseau.tools.read", "rousseau.tools.sandbox",
    "rousseau.tools.write", "rousseau.transports",
    "rousseau.transports.abilities", "rousseau.transports.base",
    "rousseau.transports.split", "rousseau.transports.telegram",
    "rousseau.transports.unreadable",
    "rousseau.transports.telegram_http", "rousseau.web", "rousseau.web.face",
}  # fmt: skip
NOT_YET = {
    "openai", "anthropic", "boto3", "botocore", "google", "slack_sdk", "slack_bolt",
    "discord", "nio", "neonize", "mcp", "psycopg", "playwright", "starlette", "uvicorn",
    "bashlex", "sqlite_utils", "re2", "httpcore", "h2", "trafilatura", "lxml", "pypdf",
}  # fmt: skip
"""Top-level packages the first poll of a Telegram daemon on OpenAI never needs."""


def test_the_daemon_imports_only_what_its_first_poll_needs(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "provider": "openai",
                "openai": {"api_key": "sk-test-0123456789abcdef"},
                "telegram": {"token": "123456:TEST-token", "allowlist": [1]},
                "state": {"path": str(tmp_path / "s.db")},
                "health": {"listen": "127.0.0.1:9090"},
                # transcription uses the openai SDK too: made at the first voice note
                "media": {"transcription": {"base_url": "http://127.0.0.1:8000/v1"}},
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-c", BUILD_DAEMON, str(config)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    loaded = set(json.loads(out))
    assert {m for m in loaded if m.startswith("rousseau")} == OURS
    assert {m.split(".")[0] for m in loaded} & NOT_YET == set()
