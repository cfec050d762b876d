"""`rousseau reload`: the config file checked here, then applied by the running daemon
(SIGHUP), which says how it went in what `rousseau status` reads."""

from __future__ import annotations

import argparse
import os
import signal
import time

from rousseau.cli.common import load


def reload(args: argparse.Namespace) -> int:
    from rousseau.state.lock import running

    config = load(args)  # broken: its one line, naming the key, and exit 1 (nothing sent)
    info = running(config.state.path)
    if info is None or not info.pid:
        print(f"no daemon runs on {config.state.path}; `rousseau run` reads the file at start")
        return 1
    asked = time.time()
    os.kill(info.pid, signal.SIGHUP)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = running(config.state.path)
        if now is None or now.pid != info.pid:
            print("the daemon stopped before it answered")
            return 1
        said = now.config
        if float(said.get("at", 0)) < asked:
            continue
        if not said.get("ok"):
            print(f"not reloaded; the daemon keeps its config: {said.get('error', '')}")
            return 1
        print(f"reloaded (config {said.get('digest', '')}) in daemon {info.pid}")
        for name in said.get("restarted", []):
            print(f"  {name}: restarted with its new section")
        for line in said.get("needs", []):
            print(f"  needs a restart to apply: {line}")
        return 0
    print(f"daemon {info.pid} did not answer within {args.timeout:g}s (see its log)")
    return 1
