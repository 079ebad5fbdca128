"""The project's BuildGrid fixture serves REAPI and stops without leaving a process behind."""

from __future__ import annotations

from pathlib import Path

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)

from tests.buildgrid_server import BuildGrid, unavailable_reason


def test_server_advertises_execution_and_caching(buildgrid: BuildGrid) -> None:
    with grpc.insecure_channel(buildgrid.address.removeprefix("grpc://")) as channel:
        caps = re_grpc.CapabilitiesStub(channel).GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name=""), timeout=10
        )
    assert caps.execution_capabilities.exec_enabled
    # buildgrid-common's proto predates the field's rename to digest_functions
    assert list(caps.cache_capabilities.digest_function) == [re_pb2.DigestFunction.SHA256]


def test_stop_ends_both_servers_by_pid(tmp_path: Path) -> None:
    assert unavailable_reason() is None
    grid = BuildGrid.start(tmp_path / "grid")
    assert grid.server is not None and grid.postgres is not None
    server, postgres = grid.server, grid.postgres
    grid.stop()
    assert server.poll() is not None and postgres.poll() is not None
