"""A daemon whose secrets come from `file:` and `env:` references shows none of them: not on
any page of the web face, not in its log, not in `rousseau status`, not in a backup made
without --with-secrets (the secrets are looked for in every byte)."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.web.conftest import OWNER_CHAT, WebDaemon, model

PAGES = ("/", "/sessions", "/usage", "/cron", "/audit", "/approvals", "/pairings", "/memory",
         "/chat", "/metrics", "/healthz", "/v1/models")  # fmt: skip


def test_no_resolved_secret_in_a_page_a_log_line_status_or_a_backup(tmp_path: Path) -> None:
    pytest.importorskip("argon2", reason="the web extra (pip install 'rousseau[web]')")
    telegram = FakeTelegram(token="777777:fileSECRETfileSECRETfileSECRETfile").start()
    llm = FakeLLMServer().start()
    llm.responder = model
    daemon = WebDaemon(tmp_path, telegram, llm)
    key = "sk-envSECRETenvSECRETenvSECRET"
    (tmp_path / "telegram-token").write_text(telegram.token + "\n")
    data = json.loads(daemon.config.read_text())
    data["telegram"]["token"] = "file:telegram-token"
    data["openai"]["api_key"] = "env:MODEL_KEY"
    daemon.config.write_text(json.dumps(data))
    environment = daemon.env

    def env() -> dict[str, str]:
        return {**environment(), "MODEL_KEY": key}

    daemon.env = env  # type: ignore[method-assign]
    secrets = [telegram.token, key]
    try:
        daemon.start()
        telegram.push("hello", chat_id=OWNER_CHAT, user_id=OWNER_CHAT)
        telegram.wait_sent(1)
        assert any(key in str(r.headers) for r in llm.requests)  # the reference was resolved
        with daemon.logged_in() as client:
            shown = "".join(client.get(page).text for page in PAGES)
        status = daemon.rousseau("status")
        made = daemon.rousseau("backup", "create", str(tmp_path / "b.tar"))
        assert made.returncode == 0, made.stderr
    finally:
        daemon.stop()
        telegram.stop()
        llm.stop()
    with tarfile.open(tmp_path / "b.tar") as tar:
        backup = b"".join(
            (lambda d: gzip.decompress(d) if m.name.endswith(".gz") else d)(
                tar.extractfile(m).read()  # type: ignore[union-attr]
            )
            for m in tar
        )
    seen = {
        "pages": shown,
        "log": daemon.log.read_text(),
        "status": status.stdout + status.stderr,
        "backup": backup.decode("latin-1"),
    }
    assert "hello" in seen["pages"] and "daemon" in seen["status"]  # they were read
    for where, text in seen.items():
        for secret in secrets:
            assert secret not in text, f"a secret in the {where}"
