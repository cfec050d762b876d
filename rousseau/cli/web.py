"""`rousseau web`: what the owner needs to reach the web face."""

from __future__ import annotations

import argparse

from rousseau.cli.common import load, on_state


def link(args: argparse.Namespace) -> int:
    import time

    from rousseau.agent import ConfigError
    from rousseau.web.auth import LINKS, new_link

    config = load(args)
    if config.web is None:
        raise ConfigError("web: not set; add web: {listen: 127.0.0.1:8080} to the config")
    token, key = new_link()
    on_state(
        args, lambda backend: backend.transport_state(LINKS).set(key, str(time.time())), config
    )
    base = (config.web.public_url or f"http://{config.web.listen}").rstrip("/")
    print(f"{base}/login/link?token={token}")
    return 0


def password(args: argparse.Namespace) -> int:
    import getpass
    import sys

    from rousseau.agent import ConfigError
    from rousseau.web.auth import hash_password

    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise ConfigError("the two passwords differ")
    else:  # piped in: the first line
        first = sys.stdin.readline().rstrip("\n")
    if len(first) < 8:
        raise ConfigError("a password needs at least 8 characters")
    print(hash_password(first))
    return 0


def key(args: argparse.Namespace) -> int:
    import secrets

    print("rsk-" + secrets.token_urlsafe(32))
    return 0
