"""A real ngIRCd (Debian's ngircd) for the tests: 127.0.0.1 only, a plain and a TLS port,
flood penalties off (the bot paces itself; the tests need not wait for the server's), the
channel #room predefined. It can be stopped and started again on the same ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import end_process, free_port, listening, self_signed

BINARY = "/usr/sbin/ngircd"


def ngircd_binary() -> str | None:
    return BINARY if os.access(BINARY, os.X_OK) else shutil.which("ngircd")


class Ngircd:
    def __init__(self, binary: str, *, penalties: bool = False) -> None:
        self.binary = binary
        # Not under pytest's folders (0700): ngIRCd runs as `nobody` when started as root.
        self.folder = Path(tempfile.mkdtemp(prefix="rousseau-ngircd-"))
        self.folder.chmod(0o755)
        self.port = free_port()
        self.tls_port = free_port()
        self.penalties = penalties
        self.proc: subprocess.Popen[bytes] | None = None
        self.config = self.folder / "ngircd.conf"

    def _write(self) -> None:
        (self.folder / "conf.d").mkdir(exist_ok=True)
        self_signed(self.folder / "cert.pem", self.folder / "key.pem")
        # ngIRCd will not run as root: it becomes `nobody`, who must read its files.
        uid = gid = 65534 if os.getuid() == 0 else None
        if uid is not None:
            for path in [self.folder, *self.folder.iterdir()]:
                os.chown(path, uid, gid)  # type: ignore[arg-type]
        ids = f"\tServerUID = {uid}\n\tServerGID = {gid}\n" if uid is not None else ""
        self.config.write_text(
            "[Global]\n"
            "\tName = irc.test.local\n\tInfo = rousseau tests\n\tNetwork = TestNet\n"
            f"\tListen = 127.0.0.1\n\tPorts = {self.port}\n\tMotdPhrase = tests\n"
            f"\tPidFile = {self.folder}/ngircd.pid\n{ids}"
            "\tAdminInfo1 = tests\n\tAdminInfo2 = tests\n\tAdminEMail = tests@test.local\n"
            "[Limits]\n"
            "\tMaxConnections = 0\n\tMaxConnectionsIP = 0\n\tMaxJoins = 0\n\tMaxNickLength = 30\n"
            f"\tMaxPenaltyTime = {-1 if self.penalties else 0}\n"
            "\tPingTimeout = 120\n\tPongTimeout = 20\n\tIdleTimeout = 0\n"
            "[Options]\n"
            f"\tIncludeDir = {self.folder}/conf.d\n"
            "\tDNS = no\n\tIdent = no\n\tPAM = no\n\tRequireAuthPing = no\n"
            "[SSL]\n"
            f"\tCertFile = {self.folder}/cert.pem\n\tKeyFile = {self.folder}/key.pem\n"
            f"\tPorts = {self.tls_port}\n"
            "[Operator]\n\tName = tests\n\tPassword = tests-oper\n"
            "[Channel]\n\tName = #room\n\tTopic = tests\n\tModes = +n\n"
        )

    def start(self) -> Ngircd:
        if not self.config.exists():
            self._write()
        with (self.folder / "ngircd.log").open("ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [self.binary, "-n", "-f", str(self.config)], stdout=log, stderr=log
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ngircd exited: {(self.folder / 'ngircd.log').read_text()}")
            if listening(self.port) and listening(self.tls_port):
                return self
            time.sleep(0.05)
        raise RuntimeError("ngircd did not start")

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if not os.environ.get("KEEP_NGIRCD"):
            shutil.rmtree(self.folder, ignore_errors=True)
