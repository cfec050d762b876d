"""Small things many tests need: the `rousseau` command as a user runs it, a free port and
a self-signed certificate for TLS servers on 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rousseau.agent import Provider
    from rousseau.config import Config
    from rousseau.daemon import Daemon
    from rousseau.messages import Inbound
    from rousseau.router import Router
    from rousseau.transports.base import MemoryTransport, Transport

_SCRIPT = Path(sys.executable).parent / "rousseau"
ROUSSEAU = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "rousseau"]
"""The installed console script, or the module when running from a source tree."""


def unavailable(reason: str) -> None:
    """Something a test needs is missing: a failure in CI (which installs everything), a
    skip that says why on a developer's machine."""
    import os

    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must install it)")
    pytest.skip(reason)


def config_in(tmp: Path, **env: str) -> Config:
    """A config whose home, state and workspace live in `tmp`, plus any `ROUSSEAU_*` (or
    other) variables given, as the daemon reads them from the environment."""
    from rousseau.config import load_config

    return load_config(
        None,
        {
            "HOME": str(tmp),
            "ROUSSEAU_STATE_PATH": str(tmp / "s.db"),
            "ROUSSEAU_AGENT_WORKSPACE": str(tmp / "ws"),
            **env,
        },
    )


def free_port() -> int:
    """A loopback port nothing listens on (right now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def receiving_posts(transport: Any, port: int) -> AsyncIterator[list[Inbound]]:
    """A transport that takes posts running, its route served on `port` as the daemon serves
    it; the messages it takes, in order."""
    import anyio

    from rousseau import web

    taken: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        taken.append(inbound)

    assert transport.posts is not None
    listener = await web.listen(f"127.0.0.1:{port}", transport.name)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(web.serve_posts, [transport.posts], listener)
        await tg.start(transport.run, handler)
        yield taken
        await transport.stop()
        tg.cancel_scope.cancel()
    await transport.aclose()


def build_from(tmp: Path, text: str) -> None:
    """The transports a config file of `text` makes (its ConfigError, if it makes none)."""
    from rousseau.config import load_config
    from rousseau.transports import build_transports

    (tmp / "built.yaml").write_text(text)
    build_transports(load_config(str(tmp / "built.yaml"), {"HOME": str(tmp)}))


def listening(port: int) -> bool:
    """Whether something on this machine takes connections on `port` (a server started)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def self_signed(cert: Path, key: Path) -> None:
    """A certificate for 127.0.0.1 and localhost, for the TLS listeners."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)


@asynccontextmanager
async def serving(
    transport: Transport, config: Config, provider: Provider, allowlist: Iterable[str]
) -> AsyncIterator[Daemon]:
    """A daemon serving one transport (allowing `allowlist`), once it is connected."""
    import anyio

    from rousseau.daemon import Daemon
    from rousseau.router import ChatPolicy

    daemon = Daemon(
        config,
        transports={transport.name: transport},
        chat_policies={transport.name: ChatPolicy(allowlist=frozenset(allowlist))},
        provider=provider,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(20):
            while not transport.connected:
                await anyio.sleep(0.02)
        yield daemon
        daemon.stop()


@asynccontextmanager
async def routing(router: Router, transport: MemoryTransport) -> AsyncIterator[None]:
    """A router taking `transport`'s messages and delivering its replies, until the block
    ends (which has 20 s)."""
    import anyio

    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        await tg.start(transport.run, router.submit)
        tg.start_soon(router.deliver, transport.name)
        with anyio.fail_after(20):
            yield
        tg.cancel_scope.cancel()


async def settled(router: Router, *transports: str) -> None:
    """Wait (10 s at most) until every message taken in is answered and every reply queued
    for `transports` (all, if none is named) went out: anything answered twice, or that
    should not have been answered, has shown by then."""
    import anyio

    with anyio.fail_after(10):
        await router.wait_idle()
        # Delivery has no event of its own: the outbox's count is the condition.
        while await router.state.outbox_pending(list(transports) or None):
            await anyio.sleep(0.01)


@asynccontextmanager
async def receiving(transport: Transport) -> AsyncIterator[list[Inbound]]:
    """Run a transport alone, collecting what it hands over, until the block ends."""
    import anyio

    received: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        received.append(inbound)

    async with anyio.create_task_group() as tg:
        await tg.start(transport.run, handler)
        yield received
        await transport.stop()


@asynccontextmanager
async def running_transport(
    transport: Transport, handler: Callable[[Inbound], Awaitable[None]]
) -> AsyncIterator[None]:
    """Run a transport alone with `handler` (30 s at most) until the block ends; then it is
    stopped and closed."""
    import anyio

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(transport.run, handler)
                yield
                await transport.stop()
    finally:
        await transport.aclose()


def runs_below(root: int, *argv: str) -> bool:
    """Whether a process started by process `root` (or by one of those) runs `argv` now:
    a command a tool started is running, not merely asked for (Linux's /proc)."""
    parents: dict[int, int] = {}
    commands: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[pid] = cmdline.decode(errors="replace").split("\0")[:-1]
    for pid, command in commands.items():
        if command != list(argv):
            continue
        while pid in parents and pid != root:
            pid = parents[pid]
        if pid == root:
            return True
    return False


async def until(check: Callable[[], bool], seconds: float | None = None) -> None:
    """Poll `check` until it holds; with `seconds`, a TimeoutError after that long."""
    import anyio

    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.05)


def end_process(proc: subprocess.Popen[bytes] | None) -> None:
    """A test server's process ended: asked to stop, killed after 10 s if it will not."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SideBySide:
    """A handler under which each chat's message waits until every chat's has arrived: a
    transport taking one chat after the other times out in it. `taken` lists the chats
    (or what `by` says of each message) in the order their messages got through."""

    def __init__(
        self, chats: Iterable[str], by: Callable[[Inbound], str] = lambda i: i.chat_id
    ) -> None:
        import anyio

        self.arrived = {chat: anyio.Event() for chat in chats}
        self.by = by
        self.taken: list[str] = []

    async def __call__(self, inbound: Inbound) -> None:
        import anyio

        self.arrived[self.by(inbound)].set()
        with anyio.fail_after(10):
            for event in self.arrived.values():
                await event.wait()
        self.taken.append(self.by(inbound))


async def taken_side_by_side(
    transport: Transport, chats: Iterable[str], by: Callable[[Inbound], str] = lambda i: i.chat_id
) -> list[str]:
    """Run `transport` under a SideBySide handler until every chat's message got through;
    what `by` says of each, in the order they did."""
    both = SideBySide(chats, by)
    async with running_transport(transport, both):
        await until(lambda: len(both.taken) == len(both.arrived))
    return both.taken
