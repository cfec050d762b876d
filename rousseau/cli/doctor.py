"""`rousseau doctor`: checks of the config, the store, the provider and each transport."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import close_provider, load

if TYPE_CHECKING:
    from rousseau.config import Config


def doctor(args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError

    failed = False

    def report(ok: bool, what: str, detail: str) -> None:
        nonlocal failed
        failed = failed or not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what:<10} {detail}")

    try:
        config = load(args)
    except RousseauError as exc:
        report(False, "config", str(exc))
        return 1
    report(True, "config", config.source or "no file; defaults and environment")
    _doctor_store(config, report)
    _doctor_workspace(config, report)
    _doctor_sandbox(config, report)
    _doctor_provider(config, report)
    _doctor_transports(config, report)
    return 1 if failed else 0


def _doctor_sandbox(config: Config, report: Callable[[bool, str, str], None]) -> None:
    from pathlib import Path

    from rousseau.app import build_sandbox
    from rousseau.tools import SandboxError, Workspace

    sandbox = build_sandbox(config)
    if sandbox is None:
        report(True, "sandbox", "none: bash can reach whatever this user can (agent.sandbox)")
        return
    try:
        workspace = Workspace(Path(config.agent.workspace).expanduser()).root
        report(True, "sandbox", sandbox.check(workspace))
    except (SandboxError, OSError) as exc:
        report(False, "sandbox", str(exc))


def _doctor_transports(config: Config, report: Callable[[bool, str, str], None]) -> None:
    """One harmless call per configured transport, proving its credentials work."""
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.transports import TRANSPORTS, build_transports

    if not any(getattr(config, name) is not None for name in TRANSPORTS):
        return
    try:
        transports = build_transports(config)
    except RousseauError as exc:
        report(False, "transport", str(exc))
        return
    for name, transport in transports.items():

        async def run(transport: Any = transport) -> str:
            try:
                with anyio.fail_after(20):
                    return str(await transport.check())
            finally:
                await transport.aclose()

        try:
            report(True, name, f"connected as {anyio.run(run)}")
        except RousseauError as exc:  # ours name the key to fix, secrets masked
            report(False, name, str(exc))
        except Exception as exc:
            report(False, name, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def _doctor_store(config: Config, report: Callable[[bool, str, str], None]) -> None:
    from rousseau.agent import RousseauError
    from rousseau.state import Store

    try:
        with Store(config.state.path) as store:
            store.check_writable_sync()
        report(True, "store", f"{store.path} is writable")
    except RousseauError as exc:
        report(False, "store", str(exc))


def _doctor_workspace(config: Config, report: Callable[[bool, str, str], None]) -> None:
    import os
    from pathlib import Path

    path = Path(config.agent.workspace).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        ok = os.access(path, os.W_OK)
        report(ok, "workspace", f"{path}" + ("" if ok else " is not writable"))
    except OSError as exc:
        report(False, "workspace", f"{path}: {exc.strerror}")


def _doctor_provider(config: Config, report: Callable[[bool, str, str], None]) -> None:
    import anyio

    from rousseau.agent import RousseauError
    from rousseau.providers import build_provider, detect_provider

    try:
        name, why = detect_provider(config)
        provider = build_provider(config, name)
    except RousseauError as exc:
        report(False, "provider", str(exc))
        return
    report(True, "chosen", f"{name}: {why}")

    async def check() -> None:
        probe = getattr(provider, "check", None)
        try:
            if probe is not None:
                with anyio.fail_after(20):
                    await probe()
        finally:
            await close_provider(provider)

    try:
        anyio.run(check)
        report(True, "provider", f"{name} ({why}) answers")
    except TimeoutError:
        report(False, "provider", f"{name}: no answer within 20 s")
    except RousseauError as exc:
        report(False, "provider", str(exc))
