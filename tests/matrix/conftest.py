from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.matrix.synapse import Synapse, synapse_python


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    python = synapse_python()
    if python is None:
        pytest.skip(
            "Synapse is not installed: create .synapse-env (python3 -m venv .synapse-env && "
            ".synapse-env/bin/pip install matrix-synapse), as .ci/run does, or set "
            "ROUSSEAU_TEST_SYNAPSE to its python"
        )
    server = Synapse(python, Path(tmp_path_factory.mktemp("synapse"))).start()
    yield server
    server.stop()
