"""What the node tests share: a real nginx as the remote cache (one per module), and a
node's worker root of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kiln.remote_exec import node_runner

from tests.nginx_cache import NginxCache


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxCache]:
    server = NginxCache.start(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "node"
    monkeypatch.setenv(node_runner.ROOT_ENV, str(root))
    try:
        yield root
    finally:
        node_runner.close_machines()  # its sandbox and persistent workers
