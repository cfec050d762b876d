"""`rousseau service`: the unit it writes is the shipped hardening pointed at this Python and
this config, systemd accepts it, and systemctl and journalctl are driven as a user would
(here by stand-ins on PATH that record their arguments)."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rousseau.cli import service
from tests.helpers import unavailable

ROOT = Path(__file__).parent.parent
PER_INSTALL = {"ExecStart", "EnvironmentFile", "Environment", "WorkingDirectory", "ReadWritePaths"}
"""What each install fills in: everything else is the shipped unit's."""


def parse(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def shipped() -> configparser.ConfigParser:
    return parse((ROOT / "systemd" / "rousseau.service").read_text())


@dataclass
class Host:
    """A home, a config and stand-ins for systemctl and journalctl, all in tmp_path."""

    tmp: Path
    env: dict[str, str]
    config: Path
    calls: Path

    @property
    def unit(self) -> Path:
        return self.tmp / "xdg" / "systemd" / "user" / "rousseau.service"

    def fake(self, name: str, *, status: int = 0, stderr: str = "") -> None:
        """`name` on PATH: records its arguments, says `stderr`, exits with `status`."""
        script = self.tmp / "bin" / name
        script.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' \"{name} $*\" >> {shlex.quote(str(self.calls))}\n"
            f"printf '%s' {shlex.quote(stderr)} >&2\n"
            f"exit {status}\n"
        )
        script.chmod(0o755)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rousseau", "--config", str(self.config), "service", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def foreground(self) -> str:
        return shlex.join([sys.executable, "-m", "rousseau", "--config", str(self.config), "run"])


@pytest.fixture
def host(tmp_path: Path) -> Host:
    (tmp_path / "bin").mkdir()
    (tmp_path / "home").mkdir()
    runtime = tmp_path / "run"
    (runtime / "systemd").mkdir(parents=True)
    runtime.chmod(0o700)
    (runtime / "systemd" / "private").touch()  # where systemctl finds a user manager
    config = tmp_path / "conf" / "config.yaml"
    config.parent.mkdir()
    config.write_text(
        f"state:\n  path: {tmp_path / 'state' / 'sessions.db'}\n"
        f"agent:\n  workspace: {tmp_path / 'ws'}\nshutdown_grace: 2m\n"
    )
    env = {
        "PATH": str(tmp_path / "bin"),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "XDG_RUNTIME_DIR": str(runtime),
    }
    host = Host(tmp=tmp_path, env=env, config=config, calls=tmp_path / "calls")
    host.fake("systemctl")
    host.fake("journalctl")
    return host


def test_install_user_writes_a_unit_systemd_accepts_and_uninstall_removes_it(host: Host) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        unavailable("systemd-analyze is not installed (Debian package: systemd)")
        return
    result = host.run("install", "--user")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {host.unit}\n")
    text = host.unit.read_text()
    service_section = parse(text)["Service"]
    assert (
        service_section["ExecStart"] == f"{sys.executable} -m rousseau --config {host.config} run"
    )
    assert service_section["ReadWritePaths"] == f"{host.tmp / 'state'} {host.tmp / 'ws'}"
    assert service_section["TimeoutStopSec"] == "135s"  # shutdown_grace 2m, plus a margin
    assert (host.tmp / "state").is_dir() and (host.tmp / "ws").is_dir()
    assert host.called() == [
        "systemctl --user daemon-reload",
        "systemctl --user enable rousseau.service",
    ]

    verify = subprocess.run(
        [analyze, "--user", "verify", str(host.unit)],
        env={**host.env, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")

    result = host.run("uninstall", "--user")
    assert result.returncode == 0, result.stderr
    assert not host.unit.exists()
    assert host.called()[2:] == [
        "systemctl --user disable --now rousseau.service",
        "systemctl --user daemon-reload",
    ]


def test_the_system_unit_is_the_shipped_one_pointed_at_this_install() -> None:
    layout = service.Layout(
        system=True,
        python="/opt/rousseau/venv/bin/python",
        config=Path("/etc/rousseau/config.yaml"),
        state_dir=Path("/var/lib/rousseau"),
        writable=[Path("/var/lib/rousseau"), Path("/srv/rousseau work")],
    )
    ours, theirs = parse(service.render(layout)), shipped()
    assert ours.sections() == theirs.sections()
    for name in theirs.sections():
        expected = {k: v for k, v in theirs[name].items() if k not in PER_INSTALL}
        assert {k: v for k, v in ours[name].items() if k not in PER_INSTALL} == expected, name
        assert set(ours[name]) == set(theirs[name]), name
    assert ours["Service"]["ExecStart"] == (
        "/opt/rousseau/venv/bin/python -m rousseau --config /etc/rousseau/config.yaml run"
    )
    assert ours["Service"]["EnvironmentFile"] == "-/etc/rousseau/rousseau.env"
    assert ours["Service"]["ReadWritePaths"] == '/var/lib/rousseau "/srv/rousseau work"'


def test_a_user_unit_keeps_every_directive_a_user_manager_honours() -> None:
    layout = service.Layout(
        system=False,
        python=sys.executable,
        config=Path("/home/ann/.config/rousseau/config.yaml"),
        state_dir=Path("/home/ann/.local/share/rousseau"),
        writable=[Path("/home/ann/.local/share/rousseau")],
    )
    text = service.render(layout)
    ours, theirs = parse(text)["Service"], shipped()["Service"]
    adapted = {"User", "Group", "StateDirectory", "ProtectHome", "ProtectControlGroups"}
    for key, value in theirs.items():
        if key not in PER_INSTALL | adapted:
            assert ours.get(key) == value, key
    assert ours["PrivateUsers"] == "yes"  # what lets a user manager sandbox at all
    assert ours["ProtectHome"] == "read-only"
    comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for gone in ("User", "Group", "StateDirectory", "ProtectControlGroups"):
        assert gone not in ours and f"{gone}=" in comments, gone  # saying why
    assert parse(text)["Install"]["WantedBy"] == "default.target"
    assert "After" not in parse(text)["Unit"]  # a user manager has no network-online.target


def test_install_leaves_a_different_unit_alone_unless_forced(host: Host) -> None:
    printed = host.run("install", "--user", "--dry-run")
    assert printed.returncode == 0, printed.stderr
    assert not host.unit.exists() and host.called() == []
    assert host.run("install", "--user").returncode == 0
    assert host.unit.read_text() == printed.stdout
    host.unit.write_text(printed.stdout.replace("MemoryMax=1G", "MemoryMax=8G"))

    refused = host.run("install", "--user")
    assert refused.returncode == 1
    assert (
        refused.stderr
        == f"rousseau: {host.unit} differs from the unit this would write; --force replaces it\n"
    )
    assert "MemoryMax=8G" in host.unit.read_text()

    forced = host.run("install", "--user", "--force")
    assert forced.returncode == 0, forced.stderr
    assert host.unit.read_text() == printed.stdout
    again = host.run("install", "--user")
    assert again.returncode == 0 and again.stdout.startswith(f"{host.unit} is up to date\n")


def test_a_failing_systemctl_is_one_line_and_a_failed_exit(host: Host) -> None:
    host.fake("systemctl", status=1, stderr="Failed to connect to bus: No medium found\n\n")
    result = host.run("install", "--user")
    assert result.returncode == 1
    assert result.stderr == (
        "rousseau: systemctl --user daemon-reload failed: Failed to connect to bus: "
        "No medium found\n"
    )
    stopped = host.run("stop", "--user")
    assert stopped.returncode == 1 and stopped.stderr.count("\n") == 1
    assert "systemctl --user stop rousseau.service failed" in stopped.stderr


def test_without_systemd_it_says_so_and_prints_the_foreground_command(host: Host) -> None:
    (host.tmp / "bin" / "systemctl").unlink()
    (host.tmp / "bin" / "journalctl").unlink()
    for action in ("start", "logs"):
        result = host.run(action, "--user")
        assert result.returncode == 1, action
        assert result.stderr.startswith("rousseau: systemd is not available here (no ")
        assert result.stderr.count("\n") == 1, action
        assert result.stdout == host.foreground() + "\n", action
    # status still says whether a daemon runs, with systemctl's exit code for "not running"
    result = host.run("status", "--user")
    assert result.returncode == 3
    assert result.stderr.startswith("rousseau: systemd is not available here (no ")
    assert result.stdout == (
        f"daemon     not running\nto run it in the foreground: {host.foreground()}\n"
    )
    from rousseau.state.lock import DaemonLock

    lock = DaemonLock(host.tmp / "state" / "sessions.db")
    lock.acquire()  # a daemon run in the foreground
    try:
        result = host.run("status", "--user")
    finally:
        lock.release()
    assert result.returncode == 0
    assert result.stdout.startswith(f"daemon     running, pid {os.getpid()}, since ")

    # install still writes the unit (systemd may come later, as in an image being built)
    installed = host.run("install", "--user")
    assert installed.returncode == 0
    assert installed.stdout == f"wrote {host.unit}\n{host.foreground()}\n"
    assert installed.stderr.count("\n") == 1 and "not enabled" in installed.stderr
    assert host.run("uninstall", "--user").returncode == 0
    assert not host.unit.exists()


def test_no_user_manager_counts_as_no_systemd(host: Host) -> None:
    (host.tmp / "run" / "systemd" / "private").unlink()
    result = host.run("restart", "--user")
    assert result.returncode == 1
    assert "no systemd user manager is running for you" in result.stderr
    assert result.stdout == host.foreground() + "\n"
    assert host.called() == []


def test_start_stop_status_and_logs_wrap_systemctl_and_journalctl(host: Host) -> None:
    for action, said in (("start", "started"), ("restart", "restarted"), ("stop", "stopped")):
        result = host.run(action, "--user")
        assert (result.returncode, result.stdout) == (0, f"rousseau.service: {said}\n")
    host.fake("systemctl", status=3)  # systemctl status: the unit is not running
    assert host.run("status", "--user").returncode == 3
    assert host.run("logs", "--user", "-n", "5", "--follow").returncode == 0
    assert host.run("logs", "--user").returncode == 0
    assert host.called() == [
        "systemctl --user start rousseau.service",
        "systemctl --user restart rousseau.service",
        "systemctl --user stop rousseau.service",
        "systemctl --user status rousseau.service --no-pager",
        "journalctl --user-unit rousseau.service -n 5 -f",
        "journalctl --user-unit rousseau.service -n 100",
    ]


def test_user_and_system_exclude_each_other(host: Host) -> None:
    result = host.run("install", "--user", "--system")
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


def test_a_system_unit_refuses_paths_its_hardening_hides(host: Host) -> None:
    host.config.write_text("state:\n  path: /home/someone/rousseau/sessions.db\n")
    result = host.run("install", "--system", "--dry-run")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "is in a home folder, which ProtectHome= hides from a system service" in result.stderr
