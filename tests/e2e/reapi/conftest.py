"""A BuildGrid server for the REAPI tests: started once a session, stopped by PID at its end
(tests/buildgrid_server.py). Skipped, saying why, only where the platform cannot have it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.buildgrid_server import BuildGrid, unavailable_reason


@pytest.fixture(scope="session")
def buildgrid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuildGrid]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no BuildGrid here: {reason}")
    grid = BuildGrid.start(tmp_path_factory.mktemp("buildgrid"))
    try:
        yield grid
    finally:
        grid.stop()
