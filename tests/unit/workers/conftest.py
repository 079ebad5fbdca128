"""Fixtures for the persistent-worker tests: execroots with an action in them, and a pool."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kiln.workers import WorkerPool
from worker_helpers import MakeExecroot, execroot_factory


@pytest.fixture
def make_execroot(tmp_path: Path) -> MakeExecroot:
    return execroot_factory(tmp_path)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """One worker without torch: every request in a test shares it unless it dies."""
    workers = WorkerPool(sys.executable, max_instances=1, preload=())
    yield workers
    workers.shutdown()
