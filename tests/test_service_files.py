"""The service files keep the promises the README makes about them."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(ROOT / "systemd" / "rousseau.service")
    return parser


def test_systemd_unit_is_hardened_and_notifies() -> None:
    service = unit()["Service"]
    expected = {
        "Type": "notify",
        "Restart": "on-failure",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "User": "rousseau",
    }
    for key, value in expected.items():
        assert service.get(key) == value, key
    for key in ("WatchdogSec", "MemoryMax", "EnvironmentFile", "ReadWritePaths"):
        assert service.get(key), key
    assert "/var/lib/rousseau" in service["ReadWritePaths"]
    assert service["ExecStart"].endswith(" run")
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"  # systemctl reload


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    result = subprocess.run(
        ["systemd-analyze", "verify", str(ROOT / "systemd" / "rousseau.service")],
        capture_output=True,
        text=True,
    )
    problems = [
        line
        for line in result.stderr.splitlines()
        if "rousseau.service" in line
        and "Command /opt/rousseau" not in line
        and "User=rousseau" not in line
    ]
    assert problems == []


def test_dockerfile_runs_unprivileged_with_volumes_and_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "\nUSER rousseau\n" in text
    assert 'VOLUME ["/var/lib/rousseau"]' in text
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert "-slim" in text


def test_compose_and_configs_parse() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    service = compose["services"]["rousseau"]
    assert service["read_only"] is True and "no-new-privileges:true" in service["security_opt"]
    from rousseau.config import load_config

    config = load_config(str(ROOT / "deploy" / "config.yaml"), {})
    assert config.state.path == "/var/lib/rousseau/sessions.db"
    assert config.telegram is not None and config.health is not None


def test_the_cluster_compose_file_runs_three_hardened_daemons_on_postgresql() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.cluster.yaml").read_text())
    daemons = [s for name, s in compose["services"].items() if name.startswith("rousseau")]
    assert len(daemons) == 3
    for service in daemons:
        assert service["read_only"] is True and "no-new-privileges:true" in service["security_opt"]
        assert service["environment"]["ROUSSEAU_STATE_URL"].startswith("postgresql://")
        assert "postgres" in service["build"]["args"]["EXTRAS"].split(",")
    assert compose["services"]["postgres"]["image"] == "postgres:15"


def test_install_script_is_valid_shell() -> None:
    subprocess.run(["sh", "-n", str(ROOT / "deploy" / "install.sh")], check=True)
