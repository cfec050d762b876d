"""A real Dovecot IMAP server for the tests: 127.0.0.1 only, a passwd-file of users, Maildir.

It listens for plain IMAP (with STARTTLS) and for IMAP over TLS with a self-signed certificate
made here. `.ci/run` installs the Debian package dovecot-imapd; ROUSSEAU_TEST_DOVECOT names
another binary.
"""

from __future__ import annotations

import imaplib
import itertools
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from tests.helpers import end_process, free_port, self_signed

POOL = 1000
CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{root}/cert.pem
ssl_key = <{root}/key.pem
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{root}/mail/%u
first_valid_uid = {uid}
default_internal_user = {user}
default_login_user = {login_user}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {tls_port}
  }}
}}
service anvil {{
  chroot =
}}
"""


def dovecot_binary() -> str | None:
    named = os.environ.get("ROUSSEAU_TEST_DOVECOT")
    return named or shutil.which("dovecot", path="/usr/sbin:/usr/bin")


class Dovecot:
    def __init__(self, binary: str, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.port = free_port()
        self.tls_port = free_port()
        self.cert = root / "cert.pem"
        self.config = root / "dovecot.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        self.users = {f"bot{i}": "secret" for i in range(POOL)}
        self._next = itertools.count()

    def start(self) -> Dovecot:
        if os.getuid() == 0:  # dovecot never gives mail access to root: use its own users
            owner = pwd.getpwnam("dovecot")
            user, login_user = "dovecot", "dovenull"
        else:
            owner = pwd.getpwuid(os.getuid())
            user = login_user = owner.pw_name
        for sub in ("run", "state", "mail", "home"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("mail", "home"):
            os.chown(self.root / sub, owner.pw_uid, owner.pw_gid)
        self.root.chmod(0o755)
        self_signed(self.cert, self.root / "key.pem")
        (self.root / "users").write_text("".join(f"{u}:{p}\n" for u, p in self.users.items()))
        self.config.write_text(
            CONFIG.format(
                root=self.root,
                uid=owner.pw_uid,
                gid=owner.pw_gid,
                user=user,
                login_user=login_user,
                port=self.port,
                tls_port=self.tls_port,
            )
        )
        self.proc = subprocess.Popen(
            [self.binary, "-F", "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                imaplib.IMAP4("127.0.0.1", self.port, timeout=2).logout()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"dovecot did not start: {self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def add_user(self) -> str:
        """A mailbox of its own for one test (taken from the passwd-file written at start:
        dovecot re-reads a changed file only now and then)."""
        user = f"bot{next(self._next)}"
        if user not in self.users:
            raise RuntimeError("the test Dovecot ran out of users: raise POOL")
        return user

    def imap(self, user: str) -> imaplib.IMAP4:
        client = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        client.login(user, self.users[user])
        return client

    def deliver(self, user: str, message: bytes, mailbox: str = "INBOX") -> None:
        """Put a message into the user's mailbox, unseen, as a delivery agent would."""
        client = self.imap(user)
        try:
            client.append(mailbox, "", imaplib.Time2Internaldate(time.time()), message)
        finally:
            client.logout()

    def flags(self, user: str) -> dict[str, bytes]:
        """Each message's Message-ID and its flags."""
        client = self.imap(user)
        try:
            client.select("INBOX", readonly=True)
            _, data = client.fetch("1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
        finally:
            client.logout()
        out: dict[str, bytes] = {}
        for item in data:
            if isinstance(item, tuple):
                header = item[1].decode().split(":", 1)[-1].strip()
                out[header] = item[0]
        return out

    def kick(self, user: str) -> None:
        """Drop every IMAP connection of a user, as a server restart would."""
        done = subprocess.run(
            ["doveadm", "-c", str(self.config), "kick", user], capture_output=True, check=False
        )
        if done.returncode not in (0, 68):  # 68: nobody was connected
            raise RuntimeError(f"doveadm kick failed: {done.stderr.decode()}")

    def stop(self) -> None:
        end_process(self.proc)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
