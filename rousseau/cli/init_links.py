"""`rousseau init`, the platforms whose account is linked or registered rather than given by
a token: Signal (signal-cli links by QR code, or registers a number), WhatsApp (linked by QR
code, the phone being the owner), and email's owner (the first new mail, read without
marking it)."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from typing import TYPE_CHECKING

from rousseau.cli.init import CHECK_TIMEOUT, Failed, confirm, printable

if TYPE_CHECKING:
    from rousseau.cli.init_platforms import Chosen
    from rousseau.config import Config

CAPTCHA_PAGE = "https://signalcaptchas.org/registration/generate.html"
MAIL_POLL = 1.0  # seconds between looks at the mailbox while waiting for the owner's mail


# -- Signal ----------------------------------------------------------------------------------


def signal_account(args: argparse.Namespace, chosen: Chosen) -> None:
    """The bot's number, registered or linked in signal-cli here (checked in its own list)."""
    cli = _signal_cli(chosen)
    version = _run(cli, ["--version"], "signal-cli --version")
    if not args.yes:
        print(f"ok    {printable(version.strip() or cli[0])}")
    given = os.environ.get("ROUSSEAU_SIGNAL_ACCOUNT", "").strip()
    while True:
        if args.yes:
            if not given:
                raise Failed("signal.account: not given; set ROUSSEAU_SIGNAL_ACCOUNT", 2)
            account = given
        else:
            account = _choose_account(cli, given, args.wait)
        listed = _run(cli, ["listAccounts"], "signal-cli listAccounts")
        if account in listed.split():
            chosen.values["account"] = account
            return
        problem = (
            f"signal.account: {account} is neither registered nor linked in signal-cli here "
            "(signal-cli listAccounts)"
        )
        if args.yes:
            raise Failed(problem)
        print(f"FAIL  {problem}")


def _signal_cli(chosen: Chosen) -> list[str]:
    import yaml

    extra = yaml.safe_load(chosen.values.get("extra_args", "")) or []
    binary = chosen.values.get("binary") or "signal-cli"
    return [binary, *(str(a) for a in extra)] if isinstance(extra, list) else [binary]


def _choose_account(cli: list[str], given: str, wait: float) -> str:
    print("The bot's Signal number:")
    print("  1) link to the Signal app on a phone that has the bot's number (QR code)")
    print("  2) register a number for the bot here (a code comes by SMS)")
    print("  3) a number signal-cli already has here")
    while True:
        answer = input(f"Choose [{'3' if given else '1'}]: ").strip() or ("3" if given else "1")
        if answer == "1":
            return _link(cli, wait)
        if answer == "2":
            return _register(cli, _number("The number to register"))
        if answer == "3":
            return _number("The number", given)
        print("  1, 2 or 3")


def _number(prompt: str, default: str = "") -> str:
    while True:
        answer = input(f"{prompt} (+ and digits){f' [{default}]' if default else ''}: ")
        answer = answer.strip().replace(" ", "") or default
        if answer.startswith("+") and answer[1:].isdigit():
            return answer
        print("  the number with its country code, e.g. +15551234567")


def _link(cli: list[str], wait: float) -> str:
    """`signal-cli link`: its address shown as a QR code; the number once the phone agreed."""
    import threading

    import segno

    process = subprocess.Popen(
        [*cli, "link", "-n", "rousseau"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(wait, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip()
        if not address.startswith(("sgnl://", "tsdevice:")):
            raise Failed(f"signal-cli link: {_said(process)}")
        print("\nOn the phone: Signal > Settings > Linked devices > Link new device, and scan:\n")
        segno.make(address, error="l").terminal(compact=True)
        print(f"\nWaiting up to {wait:.0f} s ...", flush=True)
        for line in process.stdout:
            if line.startswith("Associated with:"):
                number = line.split(":", 1)[1].strip()
                print(f"ok    linked to {printable(number)}")
                return number
        raise Failed(f"signal-cli link: not linked within {wait:.0f} s ({_said(process)})")
    finally:
        timer.cancel()
        process.kill()
        process.wait()


def _said(process: subprocess.Popen[str]) -> str:
    process.kill()
    _, err = process.communicate()
    return " ".join(err.split())[-300:] or f"exit {process.returncode}"


def _register(cli: list[str], number: str) -> str:
    """`signal-cli register`, with the captcha Signal asks for, then `verify` with the code."""
    command = ["-a", number, "register"]
    result = _attempt(cli, command)
    if result.returncode != 0 and "captcha" in result.stderr.lower():
        print(f"\nSignal asks for a captcha: open {CAPTCHA_PAGE}, solve it, and copy the")
        print("address of the 'Open Signal' link it shows (it starts with signalcaptcha://).")
        captcha = ""
        while not captcha.startswith("signalcaptcha://"):
            captcha = input("Captcha link: ").strip()
        result = _attempt(cli, [*command, "--captcha", captcha])
    if result.returncode != 0:
        raise Failed(f"signal-cli register: {_tail(result)}")
    while True:
        code = input(f"The code sent to {number}: ").strip().replace("-", "")
        verified = _attempt(cli, ["-a", number, "verify", code])
        if verified.returncode == 0:
            print(f"ok    {number} is registered")
            return number
        print(f"FAIL  signal-cli verify: {_tail(verified)}")


def _attempt(cli: list[str], command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*cli, *command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT * 3,
        )
    except OSError as exc:
        raise Failed(f"signal: cannot run {cli[0]!r} ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        waited = f"no answer within {CHECK_TIMEOUT * 3:.0f} s"
        raise Failed(f"signal-cli {command[-1]}: {waited}") from None


def _run(cli: list[str], command: list[str], what: str) -> str:
    result = _attempt(cli, command)
    if result.returncode != 0:
        raise Failed(f"{what}: {_tail(result)}")
    return result.stdout


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    said = " ".join((result.stderr or result.stdout).split())
    return printable(said[-300:]) or f"exit {result.returncode}"


# -- WhatsApp --------------------------------------------------------------------------------


def whatsapp(args: argparse.Namespace, chosen: Chosen) -> None:
    """Link the account by QR code (unless a session is already paired); the linked phone
    is the owner."""
    from pathlib import Path

    import anyio

    from rousseau.agent import RousseauError
    from rousseau.config import WhatsAppConfig
    from rousseau.private import private_folder
    from rousseau.transports.whatsapp import login, paired_phone

    store = chosen.values.get("store") or WhatsAppConfig().store
    chosen.values["store"] = store
    path = str(Path(store).expanduser())
    try:
        phone = paired_phone(path)
        if phone is None:
            if args.yes:
                raise Failed(
                    f"whatsapp: no device is paired in {store}; run `rousseau init --add "
                    "whatsapp` at a terminal to scan the QR code",
                    2,
                )
            private_folder(Path(path).parent)
            print("Scan the QR code with WhatsApp: Settings > Linked devices > Link a device")
            anyio.run(login, path)
            phone = paired_phone(path)
    except TimeoutError:
        raise Failed("whatsapp: the QR code was not scanned within 300 s") from None
    except RousseauError as exc:
        raise Failed(str(exc)) from None
    if phone is None:
        raise Failed(f"whatsapp: no device is paired in {store}")
    chosen.owners = chosen.owners or [phone]
    if not args.yes:
        print(f"ok    whatsapp: linked to +{phone}, the owner (who writes in 'Message yourself')")


# -- email -----------------------------------------------------------------------------------


def first_mail(args: argparse.Namespace, config: Config, address: str) -> str:
    """The sender of the first mail to arrive from now, once the user confirms it: read
    without marking it, so mail already waiting stays as it was; the one chosen is marked
    seen, and the daemon does not answer it."""
    from email import message_from_bytes
    from email.utils import parseaddr

    from imapclient.exceptions import IMAPClientError

    from rousseau.agent import RousseauError
    from rousseau.transports import build_transports
    from rousseau.transports.mail import EmailTransport

    transport = build_transports(config, only="email")["email"]
    assert isinstance(transport, EmailTransport)
    try:
        session = transport.imap_session()
    except (RousseauError, OSError, IMAPClientError) as exc:
        raise Failed(str(exc)) from None
    try:
        status = session.folder_status(transport.mailbox, [b"UIDNEXT"])
        after = int(status[b"UIDNEXT"])
        print(f"\nNow send a mail to {address} from your own address.")
        print(f"Waiting up to {args.wait:.0f} s ...", flush=True)
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            session.noop()
            # `N:*` always names the newest mail, new or not: what is older is left out
            for uid in sorted(u for u in session.search(["UID", f"{after}:*"]) if u >= after):
                header = session.fetch([uid], [b"BODY.PEEK[HEADER.FIELDS (FROM)]"])[uid]
                raw = next((v for k, v in header.items() if k.startswith(b"BODY")), b"")
                name, sender = parseaddr(str(message_from_bytes(raw).get("From", "")))
                after = uid + 1
                if "@" not in sender:
                    continue
                shown = printable(f"{name} <{sender}>" if name else sender)
                print(f"\nMail from {shown}.")
                if confirm("Admit them as the owner?"):
                    session.add_flags([uid], [b"\\Seen"])
                    print(f"ok    {shown} is the owner")
                    return sender.strip().lower()
                print("Not admitted. Waiting for another mail...", flush=True)
            time.sleep(MAIL_POLL)
    except (OSError, IMAPClientError) as exc:
        raise Failed(f"email: IMAP {transport.imap_host}:{transport.imap_port} ({exc})") from None
    finally:
        try:
            session.logout()
        except (OSError, IMAPClientError):
            pass
    raise Failed(
        f"no mail reached {address} within {args.wait:.0f} s; nothing written (run it again, "
        "or pass --allow ADDRESS)"
    )
