"""`rousseau web password|key|link` and the web section's config errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rousseau.agent import ConfigError
from rousseau.config import load_config
from tests.helpers import ROUSSEAU


def _run(tmp: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    config = tmp / "config.yaml"
    if not config.exists():
        config.write_text(f"state: {{path: {tmp / 's.db'}}}\n")
    return subprocess.run(
        [*ROUSSEAU, "--config", str(config), "web", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)},
    )


def test_password_prints_an_argon2_hash_that_verifies(tmp_path: Path) -> None:
    argon2 = pytest.importorskip("argon2")
    done = _run(tmp_path, "password", stdin="a long enough password\n")
    assert done.returncode == 0, done.stderr
    hashed = done.stdout.strip()
    assert hashed.startswith("$argon2id$") and "a long enough" not in hashed
    assert argon2.PasswordHasher().verify(hashed, "a long enough password")
    short = _run(tmp_path, "password", stdin="short\n")
    assert short.returncode != 0 and "at least 8 characters" in short.stderr


def test_key_prints_a_new_key_each_time(tmp_path: Path) -> None:
    keys = {_run(tmp_path, "key").stdout.strip() for _ in range(2)}
    assert len(keys) == 2 and all(k.startswith("rsk-") and len(k) > 40 for k in keys)


def test_link_needs_the_web_section(tmp_path: Path) -> None:
    done = _run(tmp_path, "link")
    assert done.returncode != 0 and "web: not set" in done.stderr


@pytest.mark.parametrize(
    ("web", "named"),
    [
        ({"api_keys": [{"key": "short", "owner": "alice"}]}, "web.api_keys.0.key"),
        ({"api_keys": [{"key": "x" * 30, "owner": "al ice"}]}, "web.api_keys.0.owner"),
        ({"listen": "8080"}, "web.listen"),
        ({"pasword_hash": "x"}, "web.pasword_hash"),
        ({"trusted_proxies": ["127.0.0.1", "proxy.local"]}, "web.trusted_proxies"),
        ({"api_max_bytes": 10}, "web.api_max_bytes"),
    ],
)
def test_a_broken_web_section_names_the_key(
    tmp_path: Path, web: dict[str, object], named: str
) -> None:
    import json

    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"web": web}))
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(str(config), {})
