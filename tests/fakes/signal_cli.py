"""A stand-in for `signal-cli -a ACCOUNT jsonRpc`: JSON-RPC on stdin/stdout, as signal-cli
speaks it. Tests inject `receive` notifications (and an exit) through a UNIX socket named by
FAKE_SIGNAL_CONTROL; every request is logged to FAKE_SIGNAL_LOG.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

write_lock = threading.Lock()
UNREGISTERED = "+15550009999"
"""An account this signal-cli was never registered with: it says so and exits, as the real
one does."""


def emit(obj: dict[str, object]) -> None:
    with write_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def control(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("r") as lines:
            for line in lines:
                command = json.loads(line)
                if "exit" in command:
                    print("fake signal-cli: terminated unexpectedly", file=sys.stderr, flush=True)
                    os._exit(int(command["exit"]))
                emit({"jsonrpc": "2.0", "method": "receive", "params": command})


REGISTERED = "+15550000000"
"""The account every data folder starts with."""
CAPTCHA = "signalcaptcha://"
CODE = "123456"
"""The verification code that registers a number (any other is refused)."""
LINKED = "+15550002222"
"""The number `link` is associated with, once it has shown its address."""


def accounts(folder: str) -> list[str]:
    try:
        with open(os.path.join(folder, "accounts.txt")) as listed:
            return [REGISTERED, *listed.read().split()]
    except FileNotFoundError:
        return [REGISTERED]


def add_account(folder: str, number: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "accounts.txt"), "a") as listed:
        listed.write(number + "\n")


def setup(folder: str, account: str, command: list[str]) -> int:
    """The set-up commands: listAccounts, link, register (a captcha asked first), verify."""
    name = command[0]
    if name == "listAccounts":
        for number in accounts(folder):
            print(f"Number: {number}")
        return 0
    if name == "link":
        print("sgnl://linkdevice?uuid=fake-uuid&pub_key=fake-key", flush=True)
        import time

        time.sleep(0.5)  # the phone scanning it
        add_account(folder, LINKED)
        print(f"Associated with: {LINKED}", flush=True)
        return 0
    if name == "register":
        if "--captcha" not in command or not command[-1].startswith(CAPTCHA):
            print("Captcha required for verification, use --captcha CAPTCHA", file=sys.stderr)
            return 1
        return 0
    if name == "verify":
        if command[1] != CODE:
            print("Verification failed: Invalid verification code", file=sys.stderr)
            return 1
        add_account(folder, account)
        return 0
    print(f"fake signal-cli: {name} is not faked", file=sys.stderr)
    return 2


def main() -> int:
    if "--version" in sys.argv:
        print("signal-cli 0.13.99 (fake)")
        return 0
    argv = sys.argv[1:]
    folder = os.path.expanduser("~/.local/share/signal-cli")
    account = ""
    while argv[:1] in (["--config"], ["-a"]):  # global options, in any order
        if argv[0] == "-a":
            account = argv[1]
        else:
            folder = argv[1]
        argv = argv[2:]
    if argv != ["jsonRpc"]:
        return setup(folder, account, argv)
    if account == UNREGISTERED:
        print(f"User {UNREGISTERED} is not registered.", file=sys.stderr, flush=True)
        return 1
    threading.Thread(target=control, args=(os.environ["FAKE_SIGNAL_CONTROL"],), daemon=True).start()
    log = open(os.environ["FAKE_SIGNAL_LOG"], "a")
    for line in sys.stdin:
        request = json.loads(line)
        log.write(json.dumps(request) + "\n")
        log.flush()
        method = request.get("method")
        if method == "send":
            emit({"jsonrpc": "2.0", "result": {"timestamp": 1700000000000}, "id": request["id"]})
        elif method == "sendTyping":
            emit({"jsonrpc": "2.0", "result": {}, "id": request["id"]})
        else:
            emit(
                {
                    "jsonrpc": "2.0",
                    "error": {"code": -32601, "message": f"Method not implemented: {method}"},
                    "id": request["id"],
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
