"""Memory taken by an inbound file whose platform lies about its size: a Telegram document
said to be 1 kB whose body is 50 MB (no Content-Length), taken in by the Telegram adapter
with the default limit (20 MB).

Prints the adapter process's peak RSS before the file and after it was refused. The fake Bot
API runs in this process, the adapter in a child of its own, so only the adapter's memory
counts. Run it on another checkout (its own bench/) to compare.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = 50_000_000
DECLARED = 1_000


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def adapter(url: str, token: str, folder: str) -> None:
    """The child: the adapter takes one update in and says what it cost."""
    import anyio

    from rousseau.media import BlobStore, MediaIntake
    from rousseau.messages import Inbound
    from rousseau.transports.telegram import TelegramTransport

    async def main() -> None:
        transport = TelegramTransport(token, base_url=url)
        transport.bind_media(
            MediaIntake(blobs=BlobStore(folder=Path(folder) / "media"), workspace=Path(folder))
        )
        got: list[Inbound] = []
        done = anyio.Event()

        async def handler(inbound: Inbound) -> None:
            got.append(inbound)
            done.set()

        before = peak_mb()
        async with anyio.create_task_group() as tg:
            tg.start_soon(transport.run, handler)
            with anyio.fail_after(120):
                await done.wait()
            await transport.stop()
        await transport.aclose()
        print(json.dumps({"before": before, "after": peak_mb(), "refusal": got[0].refusal}))

    anyio.run(main)


def main() -> None:
    from tests.fakes.telegram import FakeTelegram

    fake = FakeTelegram().start()
    try:
        body = b"%PDF-1.4\n" + bytes(BODY - 9)
        attach = ("document", body, "big.pdf", "application/pdf")
        fake.push("read this", chat_id=42, user_id=42, attach=attach, declared=DECLARED)
        with tempfile.TemporaryDirectory() as folder:
            child = subprocess.run(
                [sys.executable, __file__, "--adapter", fake.url, fake.token, folder],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
    finally:
        fake.stop()
    found = json.loads(child.stdout.strip().splitlines()[-1])
    sent = fake.unmeasured.bodies[-1] if fake.unmeasured.bodies else BODY
    print(f"a {BODY / 1e6:.0f} MB body said to be {DECLARED:,} bytes, the limit 20 MB:")
    print(f"  adapter peak RSS before the file  {found['before']:.0f} MB")
    print(f"  adapter peak RSS after it         {found['after']:.0f} MB")
    print(f"  sent by the fake before it was cut {sent / 1e6:.1f} MB of {BODY / 1e6:.0f} MB")
    print(f"  the sender was told: {found['refusal']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--adapter"]:
        adapter(*sys.argv[2:5])
    else:
        main()
