"""The driver's RemoteSpawner on a REAPI server: upload, Execute, bring back digests.

    spawn_remote(spawn)
        input blobs the server lacks       FindMissingBlobs, then uploaded from where
                                           they are here (as the Ray spawner does)
        the action, encoded as Bazel does  Command, Directory tree, Action (encoding.py),
                                           the missing ones uploaded
        Execute(action digest)             a stream of Operations until one is done; a
                                           dropped or silent stream (a restarted server,
                                           a proxy) is resumed with WaitExecution(name),
                                           an operation the server forgot is executed
                                           again (the server deduplicates identical
                                           actions); every call and the whole wait are
                                           bounded (operation_wait.py)
        outputs this CAS lacks             downloaded, each verified as it is written

The server caches the result under the action's digest; the kiln worker
also writes kiln's entry under the action key (reapi/bot.py), so a later
build with only --remote_cache=grpc:// hits. A worker that dies mid-action
is the server's to handle (BuildGrid requeues its lease after
bot-session-keepalive-timeout); this side waits.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.longrunning import operations_pb2

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest
from kiln.cache.reapi import decode_action_result
from kiln.cache.remote_store import KnownBlobs, RemoteError, download_outputs
from kiln.exec.outcome import Source
from kiln.exec.remote_spawn import RemoteSpawn, RemoteSpawnResult
from kiln.exec.spawn import SpawnResult
from kiln.reapi.encoding import InputFile, encode_action
from kiln.reapi.operation_wait import OperationWait
from kiln.reapi.properties import platform_properties
from kiln.reapi.store import GrpcStore, describe, to_proto
from kiln.reapi.stream_deadline import bounded
from kiln.remote.options import RemoteOptions
from kiln.remote_exec.protocol import RemoteTask, TaskInput, TaskWheel


class ReapiSpawner:
    def __init__(
        self,
        executor: GrpcStore,
        store: GrpcStore,
        cas: ContentStore,
        options: RemoteOptions,
        *,
        digest_function: str,
        warn: Callable[[str], None],
    ) -> None:
        self.executor = executor  # the Execution service's server (its CAS, too)
        self.store = store  # --remote_cache: where inputs and outputs travel
        self.cas = cas
        self.options = options
        self.digest_function = digest_function
        self._warn = warn
        self._lock = threading.Lock()
        self._calls: set[grpc.Future] = set()
        self._known = KnownBlobs()  # blobs the remote store holds, as far as we know
        self._cancelled = False

    def spawn_remote(self, spawn: RemoteSpawn) -> RemoteSpawnResult:
        if self._cancelled:
            return RemoteSpawnResult.failed("interrupted", crashed=True)
        try:
            self.executor.capabilities()
        except RemoteError as error:
            return RemoteSpawnResult.failed(error.message, unreachable=True)
        started = time.monotonic()
        try:
            self._upload_inputs(spawn)
            action_digest = self._upload_action(spawn)
            response = self._execute(action_digest, spawn.timeout)
        except RemoteError as error:
            return RemoteSpawnResult.failed(f"remote execution: {error.message}")
        except _Cancelled:
            return RemoteSpawnResult.failed("interrupted", crashed=True)
        seconds = time.monotonic() - started
        return self._bring_back(response, seconds)

    # -- sending --------------------------------------------------------------------

    def _upload_inputs(self, spawn: RemoteSpawn) -> None:
        self._known.upload_missing(self.store, spawn.local_files())

    def _upload_action(self, spawn: RemoteSpawn) -> Digest:
        # The worker opens its own store: the driver's options say nothing there.
        task = RemoteTask(
            spawn.action,
            spawn.key,
            tuple(
                TaskInput(path, item.digest.hash, item.digest.size, item.executable)
                for path, item in sorted(spawn.inputs.items())
            ),
            self.digest_function,
            RemoteOptions(),
            spawn.timeout,
            tuple(TaskWheel(w.file_name, w.digest.hash, w.digest.size) for w in spawn.wheels),
            spawn.sandbox,
        )
        encoded = encode_action(
            spawn.action,
            {p: InputFile(i.digest, i.executable) for p, i in spawn.inputs.items()},
            task,
            platform_properties(spawn.action, self._default_properties()),
            spawn.timeout,
            self.digest_function,
        )
        missing = self.executor.find_missing(encoded.blobs)
        self.executor.transfer_many(
            [functools.partial(self.executor.upload_bytes, d, encoded.blobs[d]) for d in missing]
        )
        return encoded.action_digest

    def _default_properties(self) -> list[tuple[str, str]]:
        from kiln.reapi.properties import parse_property

        return [parse_property(text) for text in self.options.remote_default_exec_properties]

    # -- waiting ------------------------------------------------------------------

    def _execute(self, action: Digest, action_timeout: float | None) -> re_pb2.ExecuteResponse:
        """The operation's stream until it is done, bounded as operation_wait.py says."""
        stub = re_grpc.ExecutionStub(self.executor.channel())
        metadata = self.executor.spec.metadata
        wait = OperationWait(self.options.remote_timeout, action_timeout)
        while True:
            if self._cancelled:
                raise _Cancelled
            wait.calling()
            if wait.name:
                request: object = re_pb2.WaitExecutionRequest(name=wait.name)
                call = stub.WaitExecution(request, timeout=wait.call_deadline, metadata=metadata)
            else:
                request = re_pb2.ExecuteRequest(
                    instance_name=self.executor.instance_name, action_digest=to_proto(action)
                )
                call = stub.Execute(request, timeout=wait.call_deadline, metadata=metadata)
            try:
                for operation in self._watch(call, wait.call_deadline):
                    if operation.done:
                        return _response(operation)
                    wait.answered(operation.name, _executing(operation))
                pause = wait.failed(
                    grpc.StatusCode.UNAVAILABLE, "the stream ended before the action was done"
                )
            except grpc.RpcError as e:
                if self._cancelled:
                    raise _Cancelled from None
                pause = wait.failed(e.code() if isinstance(e, grpc.Call) else None, describe(e))
            time.sleep(pause)

    def _watch(self, call: object, deadline_s: float) -> Iterator[operations_pb2.Operation]:
        with self._lock:
            self._calls.add(call)
        try:
            yield from bounded(call, deadline_s)
        finally:
            with self._lock:
                self._calls.discard(call)

    # -- bringing back --------------------------------------------------------------

    def _bring_back(self, response: re_pb2.ExecuteResponse, seconds: float) -> RemoteSpawnResult:
        message = response.result
        worker = message.execution_metadata.worker or self.executor.url
        if response.status.code != 0:
            text = response.status.message or f"status {response.status.code}"
            return RemoteSpawnResult.failed(f"remote execution failed: {text}", lane=worker)
        printed = message.stdout_raw.decode(errors="replace")
        if message.exit_code != 0:
            output = printed + message.stderr_raw.decode(errors="replace")
            run = SpawnResult(message.exit_code, seconds, Source.RAN_REMOTELY, worker)
            return RemoteSpawnResult(run, output=output)
        try:
            result = decode_action_result(message.SerializeToString(deterministic=True))
            self._download(result)
        except ValueError as error:
            return RemoteSpawnResult.failed(f"unusable remote result: {error}", lane=worker)
        except BlobMismatch as error:
            text = f"an output from the remote cache does not match its digest: {error.message}"
            return RemoteSpawnResult.failed(text, seconds=seconds, lane=worker)
        except RemoteError as error:
            text = f"cannot download its outputs: {error.message}"
            return RemoteSpawnResult.failed(text, seconds=seconds, lane=worker)
        run = SpawnResult(0, seconds, Source.RAN_REMOTELY, worker)
        return RemoteSpawnResult(run, result, printed=printed)

    def _download(self, result: ActionResult) -> None:
        download_outputs(self.store, result, self.cas)

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    def close(self) -> None:
        self.executor.close()


class _Cancelled(Exception):
    pass


def _executing(operation: operations_pb2.Operation) -> bool:
    metadata = re_pb2.ExecuteOperationMetadata()
    if not operation.metadata.Unpack(metadata):
        return False
    return bool(metadata.stage == re_pb2.ExecutionStage.EXECUTING)


def _response(operation: operations_pb2.Operation) -> re_pb2.ExecuteResponse:
    if operation.HasField("error"):
        raise RemoteError(f"Execute: {operation.error.message or operation.error.code}")
    response = re_pb2.ExecuteResponse()
    if not operation.response.Unpack(response):
        raise RemoteError("Execute: the operation's response is no ExecuteResponse")
    return response
