"""How long the driver waits on a remote execution (kiln.reapi.operation_wait), and the
spawner's wait on a real gRPC stream that goes silent, as BuildGrid's did after a restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.longrunning import operations_pb2
from kiln.cache.digest import Digest
from kiln.cache.remote_store import RemoteError
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.operation_wait import OperationWait
from kiln.reapi.spawner import ReapiSpawner
from kiln.reapi.store import GrpcStore
from kiln.remote.options import RemoteOptions

Code = grpc.StatusCode


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _wait(action_timeout: float | None = None) -> tuple[OperationWait, _Clock]:
    clock = _Clock()
    return OperationWait(10.0, action_timeout, clock=clock), clock


def test_a_long_action_whose_stream_is_silent_is_asked_again_without_end() -> None:
    wait, clock = _wait()
    wait.calling()
    wait.answered("op", executing=True)
    for _ in range(100):  # 100 silent calls of --remote_timeout each: 1,000 s of work
        clock.now += 10.0
        assert wait.failed(Code.DEADLINE_EXCEEDED, "silent") == 0.0
        wait.calling()
        wait.answered("op", executing=True)
    assert wait.name == "op"  # WaitExecution, not a new Execute


def test_a_server_that_does_not_answer_for_longer_than_remote_timeout_fails_the_action() -> None:
    wait, clock = _wait()
    wait.calling()
    wait.answered("op", executing=False)
    pauses = []
    with pytest.raises(RemoteError, match=r"no answer from the server .*--remote_timeout=10"):
        while True:
            wait.calling()
            clock.now += 3.0
            pauses.append(wait.failed(Code.UNAVAILABLE, "connection refused"))
            clock.now += pauses[-1]
    assert 10.0 < clock.now < 25.0
    assert pauses[:3] == [0.5, 1.0, 2.0]


def test_a_call_silent_from_its_start_counts_as_no_answer() -> None:
    wait, clock = _wait()
    wait.calling()
    wait.answered("op", executing=False)
    wait.calling()
    clock.now += 10.0
    wait.failed(Code.DEADLINE_EXCEEDED, "silent")
    wait.calling()
    clock.now += 10.5
    with pytest.raises(RemoteError, match="no answer"):
        wait.failed(Code.DEADLINE_EXCEEDED, "silent")


def test_an_operation_the_server_forgot_is_executed_again() -> None:
    wait, _ = _wait()
    wait.calling()
    wait.answered("op", executing=False)
    wait.calling()
    wait.failed(Code.NOT_FOUND, "Operation name does not exist")
    assert wait.name == ""


def test_an_operation_executing_past_its_timeout_and_remote_timeout_fails() -> None:
    wait, clock = _wait(action_timeout=30.0)
    wait.calling()
    wait.answered("op", executing=False)
    clock.now += 500.0  # queued: not bounded
    wait.answered("op", executing=True)
    clock.now += 39.0
    wait.answered("op", executing=True)
    clock.now += 2.0
    with pytest.raises(RemoteError, match=r"still executing 41 s .*timeout \(30 s\)"):
        wait.answered("op", executing=True)


def test_an_error_that_no_retry_cures_fails_at_once() -> None:
    wait, _ = _wait()
    wait.calling()
    with pytest.raises(RemoteError, match="Execute: bad action"):
        wait.failed(Code.INVALID_ARGUMENT, "bad action")


# -- the spawner on a real gRPC server ------------------------------------------------------


def _operation(done: bool) -> operations_pb2.Operation:
    operation = operations_pb2.Operation(name="op-1", done=done)
    metadata = re_pb2.ExecuteOperationMetadata(stage=re_pb2.ExecutionStage.EXECUTING)
    operation.metadata.Pack(metadata)
    if done:
        operation.response.Pack(re_pb2.ExecuteResponse(result=re_pb2.ActionResult(exit_code=0)))
    return operation


class _MissedUpdate(re_grpc.ExecutionServicer):  # type: ignore[misc]
    """Execute says EXECUTING and then nothing (the "done" notification was lost, as after
    BuildGrid's restart); WaitExecution answers with the operation as it is: done."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()

    def Execute(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.calls.append("Execute")
        yield _operation(done=False)
        self.release.wait(30)

    def WaitExecution(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.calls.append(f"WaitExecution {request.name}")
        yield _operation(done=True)


def test_a_stream_that_goes_silent_is_resumed_with_wait_execution_within_remote_timeout() -> None:
    servicer = _MissedUpdate()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    re_grpc.add_ExecutionServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        executor = GrpcStore(ChannelSpec.parse(f"grpc://127.0.0.1:{port}"), timeout=1.0)
        spawner = ReapiSpawner(
            executor,
            executor,
            None,  # type: ignore[arg-type]  # no CAS: only the wait runs
            RemoteOptions(remote_timeout=1.0),
            digest_function="sha256",
            warn=lambda line: None,
        )
        started = time.monotonic()
        response = spawner._execute(Digest("0" * 64, 0), None)
        took = time.monotonic() - started
        spawner.close()
    finally:
        servicer.release.set()
        server.stop(0)
    assert response.result.exit_code == 0
    assert servicer.calls == ["Execute", "WaitExecution op-1"]
    assert took < 5.0
