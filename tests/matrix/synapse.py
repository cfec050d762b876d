"""A real Synapse homeserver for the tests: SQLite, registration open, 127.0.0.1 only.

Synapse lives in its own virtual environment (it pins what it needs); `.ci/run` creates it at
.synapse-env, or ROUSSEAU_TEST_SYNAPSE names its python.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import end_process, free_port

ROOT = Path(__file__).resolve().parent.parent.parent


def synapse_python() -> Path | None:
    named = os.environ.get("ROUSSEAU_TEST_SYNAPSE")
    candidates = [Path(named)] if named else [ROOT / ".synapse-env" / "bin" / "python"]
    return next((p for p in candidates if p.exists()), None)


class Synapse:
    def __init__(self, python: Path, folder: Path) -> None:
        self.python = python
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server_name = "localhost"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Synapse:
        config = self.folder / "homeserver.yaml"
        subprocess.run(
            [
                str(self.python),
                "-m",
                "synapse.app.homeserver",
                "--server-name",
                self.server_name,
                "--config-path",
                str(config),
                "--data-directory",
                str(self.folder),
                "--generate-config",
                "--report-stats=no",
            ],
            check=True,
            capture_output=True,
            cwd=self.folder,
        )
        extra = {
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {
                "name": "sqlite3",
                "args": {"database": str(self.folder / "homeserver.db")},
            },
            "enable_registration": True,
            "enable_registration_without_verification": True,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "report_stats": False,
            "federation_domain_whitelist": [],
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            "rc_message": {"per_second": 1000, "burst_count": 1000},
            "rc_registration": {"per_second": 1000, "burst_count": 1000},
            "rc_login": {
                "address": {"per_second": 1000, "burst_count": 1000},
                "account": {"per_second": 1000, "burst_count": 1000},
                "failed_attempts": {"per_second": 1000, "burst_count": 1000},
            },
            "rc_joins": {"local": {"per_second": 1000, "burst_count": 1000}},
            "rc_invites": {
                "per_room": {"per_second": 1000, "burst_count": 1000},
                "per_user": {"per_second": 1000, "burst_count": 1000},
            },
        }
        text = config.read_text()
        # Drop the generated listeners and database blocks; ours come last and win.
        config.write_text(
            text + "\n" + "\n".join(f"{k}: {json.dumps(v)}" for k, v in extra.items()) + "\n"
        )
        with (self.folder / "synapse.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.python), "-m", "synapse.app.homeserver", "--config-path", str(config)],
                cwd=self.folder,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "synapse exited:\n" + (self.folder / "synapse.log").read_text()[-3000:]
                )
            try:
                with urllib.request.urlopen(self.url + "/_matrix/client/versions", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("synapse did not start in 60 s")

    def stop(self) -> None:
        end_process(self.proc)

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return dict(json.loads(r.read() or b"{}"))
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from None

    def raw(
        self, method: str, path: str, data: bytes | None, token: str, content_type: str = ""
    ) -> bytes:
        """A call whose body (or answer) is not JSON: media uploads and downloads."""
        headers = {"Authorization": f"Bearer {token}"}
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from None

    def register(self, name: str, password: str = "secret-pass-123") -> dict[str, Any]:
        return self.call(
            "POST",
            "/_matrix/client/v3/register",
            {
                "username": name,
                "password": password,
                "auth": {"type": "m.login.dummy"},
                "inhibit_login": False,
            },
        )
