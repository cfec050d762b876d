"""`rousseau matrix devices|verify|block|unverify|unblock`: the devices the encrypted Matrix
transport knows, and the owner's trust decisions (kept in the store, applied by the running
transport at its next sync)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rousseau.cli.common import load, with_state

if TYPE_CHECKING:
    from rousseau.state.backend import Backend

TRUST_KEY = "trust"
DEVICES_KEY = "devices"
"""The Matrix transport's state keys (rousseau.transports.matrix, not imported: nio is not
needed to read them)."""


def devices(args: argparse.Namespace) -> int:
    config = load(args)

    async def read(backend: Backend) -> tuple[str, str]:
        state = backend.transport_state("matrix")
        return await state.get(DEVICES_KEY) or "[]", await state.get(TRUST_KEY) or "{}"

    known, decided = with_state(config, read)
    rows = json.loads(known)
    pending = json.loads(decided)
    if not rows:
        print("no devices known yet (the transport publishes them once it runs with encryption)")
    for row in rows:
        verdict = pending.get(f"{row['user']} {row['device']}")
        note = f" (you said: {verdict})" if verdict else ""
        print(
            f"{row['user']:<32} {row['device']:<12} {row['trust']:<11} {row['ed25519']}"
            f" {row['name']}{note}"
        )
    return 0


def decide(args: argparse.Namespace) -> int:
    if not args.user or not args.device:
        print(f"rousseau matrix {args.action}: give the user id and the device id")
        return 2
    config = load(args)

    async def write(backend: Backend) -> None:
        state = backend.transport_state("matrix")
        decisions = json.loads(await state.get(TRUST_KEY) or "{}")
        decisions[f"{args.user} {args.device}"] = args.action
        await state.set(TRUST_KEY, json.dumps(decisions))

    with_state(config, write)
    print(f"{args.action}: {args.user} {args.device} (applied at the transport's next sync)")
    return 0
