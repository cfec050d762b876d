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


def main() -> int:
    if "--version" in sys.argv:
        print("signal-cli 0.13.99 (fake)")
        return 0
    assert sys.argv[-1] == "jsonRpc" and sys.argv[1] == "-a", sys.argv
    if sys.argv[2] == UNREGISTERED:
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
