from __future__ import annotations

import gc
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread  # imported here on purpose: see below
import anyio.to_thread  # noqa: F401 - likewise
import pytest
import structlog

from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.helpers import unavailable
from tests.irc.ngircd import Ngircd, ngircd_binary
from tests.mail.dovecot import Dovecot, dovecot_binary
from tests.matrix.synapse import Synapse, synapse_python
from tests.postgres.server import Postgres, postgres_bin
from tests.xmpp.prosody import Prosody, prosody_binary

# Imported here, on the main thread: a first import inside a worker thread (fakes call
# anyio.from_thread there) compiles under pytest's assertion rewriter while other threads
# compile too, which CPython 3.11.7 can fail with "AST constructor recursion depth mismatch".

# neonize runs `os.popen("uname -a")` at import and never closes it. The Popen parks itself
# in subprocess's list of unreaped children until some later Popen reaps it, and the unclosed
# pipe then fails whichever test that was. Reap it here, quietly, once.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ResourceWarning)
    try:
        import neonize.aioze.events  # noqa: F401
    except ImportError:
        pass
    for child in list(getattr(subprocess, "_active", None) or []):
        child.wait()
    subprocess._cleanup()  # type: ignore[attr-defined]
    gc.collect()


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    python = synapse_python()
    if python is None:
        unavailable(
            "Synapse is not installed: create .synapse-env (python3 -m venv .synapse-env && "
            ".synapse-env/bin/pip install matrix-synapse), as .ci/run does, or set "
            "ROUSSEAU_TEST_SYNAPSE to its python"
        )
    server = Synapse(python, Path(tmp_path_factory.mktemp("synapse"))).start()
    yield server
    server.stop()


def _ngircd() -> Ngircd:
    binary = ngircd_binary()
    if binary is None:
        unavailable("ngIRCd is not installed: apt-get install ngircd, as .ci/run does")
    assert binary is not None
    return Ngircd(binary).start()


@pytest.fixture(scope="session")
def ngircd() -> Iterator[Ngircd]:
    """A real IRC server (ngIRCd) for this test session."""
    server = _ngircd()
    yield server
    server.close()


@pytest.fixture
def own_ngircd() -> Iterator[Ngircd]:
    """An IRC server of the test's own (to stop and start again)."""
    server = _ngircd()
    yield server
    server.close()


def _prosody() -> Prosody:
    binary = prosody_binary()
    if binary is None:
        unavailable("Prosody is not installed: apt-get install prosody, as .ci/run does")
    assert binary is not None
    return Prosody(binary).start()


@pytest.fixture(scope="session")
def prosody() -> Iterator[Prosody]:
    """A real XMPP server (Prosody) for this test session."""
    server = _prosody()
    yield server
    server.close()


@pytest.fixture
def own_prosody() -> Iterator[Prosody]:
    """An XMPP server of the test's own (to stop and start again)."""
    server = _prosody()
    yield server
    server.close()


@pytest.fixture
def anyio_backend() -> str:
    # The vendor SDKs are asyncio-only, and so is the daemon's event loop.
    return "asyncio"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    """The fake Bot API (a module that needs another token or kind of fake defines its own)."""
    fake = FakeTelegram().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A real PostgreSQL 15 server for this test session."""
    folder = postgres_bin()
    if folder is None:
        unavailable(
            "PostgreSQL 15 is not installed: apt-get install postgresql-15, as .ci/run does,"
            " or set ROUSSEAU_TEST_PG_BIN to its folder of binaries"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    assert folder is not None
    server = Postgres(folder).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pgvector() -> Iterator[Postgres]:
    """A real PostgreSQL with the pgvector extension for this test session: Debian's archive
    has no pgvector package, so the binaries are pgserver's (a pip-installed PostgreSQL 16
    built with it, in the dev extra)."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    folder = Path(spec.origin).parent / "pginstall" / "bin" if spec and spec.origin else None
    if folder is None or not (folder / "pg_ctl").is_file():
        unavailable("pgserver is not installed: pip install -e '.[dev]', as .ci/run does")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    assert folder is not None
    copy = None
    if os.getuid() == 0 and not _others_reach(folder):  # the server runs as `postgres`
        copy = Path(tempfile.mkdtemp(prefix="rousseau-pgvector-"))
        copy.chmod(0o755)
        packages = folder.parents[2]  # pgserver/pginstall/bin; its libraries beside pgserver
        for part in ("pgserver/pginstall", "pgserver.libs"):  # (their rpath is relative)
            shutil.copytree(packages / part, copy / part, symlinks=True)
        folder = copy / "pgserver" / "pginstall" / "bin"
    server = Postgres(folder).start()
    yield server
    server.stop()
    if copy is not None:
        shutil.rmtree(copy, ignore_errors=True)


def _others_reach(folder: Path) -> bool:
    """Whether a user other than its owner may enter `folder` (and every folder above it)."""
    return all(os.stat(p).st_mode & 0o001 for p in [folder, *folder.parents])


@pytest.fixture(scope="session")
def dovecot() -> Iterator[Dovecot]:
    binary = dovecot_binary()
    if binary is None:
        unavailable(
            "Dovecot is not installed: install the Debian package dovecot-imapd, as .ci/run "
            "does, or set ROUSSEAU_TEST_DOVECOT to its binary"
        )
    # its own folder under the system temp dir: pytest's are closed to dovecot's own users
    root = Path(tempfile.mkdtemp(prefix="rousseau-dovecot-"))
    server = Dovecot(binary, root).start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """A test that sets up logging (to capsys' stream, say) leaves no trace for the next one
    on this worker: logs to a closed capture would fail every later log call."""
    yield
    structlog.reset_defaults()
