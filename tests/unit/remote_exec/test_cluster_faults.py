"""A Ray Client call that fails in its transport is a lost cluster (a one-line error, or
--remote_local_fallback's local run), never kiln's internal error: the loaded suite saw
`ray.wait` raise gRPC's "Failed to serialize response!" when another cluster had taken
the Ray Client server's port."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
import ray
from kiln.remote_exec.address import RayAddress
from kiln.remote_exec.cluster import Cluster, ClusterUnreachable


class _Inactive(grpc.RpcError):
    def __str__(self) -> str:
        return "<_InactiveRpcError: NOT_FOUND: Failed to serialize response!>"


def test_a_failed_rpc_while_waiting_is_a_lost_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(RayAddress.parse("ray://127.0.0.1:10001"))
    monkeypatch.setattr(cluster, "connect", lambda: None)

    def wait(*args: Any, **kwargs: Any) -> Any:
        raise _Inactive()

    monkeypatch.setattr(ray, "wait", wait)
    with pytest.raises(ClusterUnreachable) as raised:
        cluster.result(object(), 1.0)  # type: ignore[arg-type]
    assert "lost the Ray cluster at ray://127.0.0.1:10001" in str(raised.value)
    assert "Failed to serialize response!" in str(raised.value)
