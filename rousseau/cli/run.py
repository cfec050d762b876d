"""`rousseau run` and the single-transport commands (`rousseau telegram`, ...)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rousseau.cli.common import load

if TYPE_CHECKING:
    from rousseau.config import Config


def run(args: argparse.Namespace) -> int:
    from rousseau.daemon import run

    config = load(args, quiet=False)
    action = getattr(args, "action", None)
    if action == "login":
        return _whatsapp_login(config)
    if action is not None and args.only == "matrix":
        from rousseau.cli import matrix

        return matrix.devices(args) if action == "devices" else matrix.decide(args)
    return run(config, only=args.only)


def _whatsapp_login(config: Config) -> int:
    from pathlib import Path

    import anyio

    from rousseau.config import WhatsAppConfig
    from rousseau.private import private_folder
    from rousseau.transports.whatsapp import login

    store = Path((config.whatsapp or WhatsAppConfig()).store).expanduser()
    private_folder(store.parent)
    print("Scan the QR code with WhatsApp on your phone: Settings > Linked devices > Link a device")
    anyio.run(login, str(store))
    print(f"paired; the session is kept in {store}")
    return 0
