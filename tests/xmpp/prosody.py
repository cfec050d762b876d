"""A real Prosody (Debian's prosody) for the tests: 127.0.0.1 only, one client port offering
STARTTLS with a self-signed certificate (plain logins allowed too, for the test people), the
host `localhost` and its rooms at `conference.localhost` (open, created on first join, the
occupants' addresses visible to all). It can be stopped and started again on the same port."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import end_process, free_port, listening, self_signed

BINARY = "/usr/bin/prosody"
DOMAIN = "localhost"
ROOMS = f"conference.{DOMAIN}"


def prosody_binary() -> str | None:
    return BINARY if os.access(BINARY, os.X_OK) else shutil.which("prosody")


class Prosody:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.ctl = str(Path(binary).with_name("prosodyctl"))
        self.folder = Path(tempfile.mkdtemp(prefix="rousseau-prosody-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.config = self.folder / "prosody.cfg.lua"

    def _write(self) -> None:
        certs = self.folder / "certs"
        certs.mkdir()
        self_signed(certs / f"{DOMAIN}.crt", certs / f"{DOMAIN}.key")
        (self.folder / "data").mkdir()
        none = "{}"
        self.config.write_text(
            f'pidfile = "{self.folder}/prosody.pid"\n'
            f'data_path = "{self.folder}/data"\n'
            f'certificates = "{certs}"\n'
            "run_as_root = true\n"
            f'log = {{ {os.environ.get("PROSODY_LOG", "info")} = "{self.folder}/prosody.log" }}\n'
            'interfaces = { "127.0.0.1" }\n'
            f"c2s_ports = {{ {self.port} }}\n"
            f"c2s_direct_tls_ports = {none}\nlegacy_ssl_ports = {none}\n"
            f"s2s_ports = {none}\ns2s_direct_tls_ports = {none}\n"
            f"http_ports = {none}\nhttps_ports = {none}\ncomponent_ports = {none}\n"
            'modules_enabled = { "roster"; "saslauth"; "tls"; "disco"; "ping"; "offline" }\n'
            'modules_disabled = { "s2s"; "s2s_auth_certs"; "dialback" }\n'
            'authentication = "internal_plain"\nstorage = "internal"\n'
            "c2s_require_encryption = false\nallow_unencrypted_plain_auth = true\n"
            "allow_registration = false\n"
            f'VirtualHost "{DOMAIN}"\n'
            f'Component "{ROOMS}" "muc"\n'
            "  muc_room_locking = false\n  restrict_room_creation = false\n"
            "  muc_room_default_public_jids = true\n"
        )

    def register(self, user: str, password: str) -> str:
        """An account on the server; its JID."""
        subprocess.run(
            [self.ctl, "--config", str(self.config), "register", user, DOMAIN, password],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return f"{user}@{DOMAIN}"

    def start(self) -> Prosody:
        if not self.config.exists():
            self._write()
        with (self.folder / "stdout.log").open("ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [self.binary, "--config", str(self.config), "-F"], stdout=log, stderr=log
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prosody exited: {self.log()}")
            if listening(self.port):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"prosody did not start: {self.log()}")

    def log(self) -> str:
        return "".join(
            path.read_text(errors="replace")
            for path in (self.folder / "stdout.log", self.folder / "prosody.log")
            if path.exists()
        )

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if not os.environ.get("KEEP_PROSODY"):
            shutil.rmtree(self.folder, ignore_errors=True)
