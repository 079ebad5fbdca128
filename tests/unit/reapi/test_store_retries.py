"""Which gRPC failures GrpcStore asks again, as Bazel's RemoteRetrier does."""

from __future__ import annotations

import grpc
import pytest
from kiln.cache.remote_store import RemoteError
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.store import GrpcStore


class _Failed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """What a stub raises: an RpcError that is also a Call with a status code."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> None: ...
    def trailing_metadata(self) -> None: ...
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None: ...
    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


def _rpc(failures: list[grpc.StatusCode]) -> tuple[list[int], object]:
    calls: list[int] = []

    def rpc(request: object, *, timeout: float, metadata: object) -> str:
        calls.append(1)
        if failures:
            raise _Failed(failures.pop(0), "Concurrent RPC limit exceeded!")
        return "answer"

    return calls, rpc


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED], ids=str
)
def test_a_server_that_will_answer_later_is_asked_again(code: grpc.StatusCode) -> None:
    """Seen under load: BuildGrid refused a BatchUpdateBlobs over its limit of concurrent
    calls, and the action failed although its upload would have gone through a moment
    later."""
    store = GrpcStore(ChannelSpec.parse("grpc://h:1"), timeout=10)
    calls, rpc = _rpc([code, code])
    assert store.call("BatchUpdateBlobs", rpc, object()) == "answer"  # type: ignore[arg-type]
    assert len(calls) == 3


def test_a_refusal_that_will_not_change_is_an_error_at_once() -> None:
    store = GrpcStore(ChannelSpec.parse("grpc://h:1"), timeout=10)
    calls, rpc = _rpc([grpc.StatusCode.PERMISSION_DENIED])
    with pytest.raises(RemoteError, match="BatchUpdateBlobs"):
        store.call("BatchUpdateBlobs", rpc, object())  # type: ignore[arg-type]
    assert len(calls) == 1


def test_retries_stop_when_the_remote_timeout_is_spent() -> None:
    store = GrpcStore(ChannelSpec.parse("grpc://h:1"), timeout=0.5)
    calls, rpc = _rpc([grpc.StatusCode.RESOURCE_EXHAUSTED] * 100)
    with pytest.raises(RemoteError, match=r"RESOURCE_EXHAUSTED|Concurrent RPC limit"):
        store.call("BatchUpdateBlobs", rpc, object())  # type: ignore[arg-type]
    assert 1 < len(calls) < 5
