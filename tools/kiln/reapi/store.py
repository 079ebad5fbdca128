"""A remote cache spoken to over the Remote Execution API (gRPC): the RemoteStore of grpc(s)://.

    GetCapabilities          once per connection: the digest functions the server takes
                             (kiln's --digest_function must be one: SHA-256 everywhere,
                             BLAKE3 where offered) and its batch size limit
    GetActionResult,         under the digest of an Action whose salt is kiln's action
    UpdateActionResult       key (below): the ActionResult message of cache/reapi.py
    FindMissingBlobs         before every upload, so a blob the server has never travels
    BatchUpdateBlobs         blobs that fit the server's batch limit
    ByteStream.Write         larger blobs, in 1 MiB chunks, resumed where the server says
                             it has them (QueryWriteStatus) after a dropped stream: a
                             multi-GB weights file is never sent twice from the start
    ByteStream.Read          every download, streamed into ContentStore.put_stream (which
                             hashes as it writes and publishes only a matching blob, so a
                             server's wrong bytes are refused, never materialised), and
                             resumed at the offset reached after a dropped stream

Action cache keys. kiln's remote-cache lookups are keyed by kiln's action key
(exec/action_key.py), a hash of everything that decides the outputs. REAPI
keys its action cache by the digest of an Action message; kiln stores its
entries under the digest of `Action{salt = key bytes}`, a well-formed Action
digest no other action has. (An action kiln executes remotely is sent as
Bazel encodes it, and the server caches that too: reapi/actions.py.)

Limits as the HTTP client's: --remote_timeout bounds each call (connecting,
the answer), and a transfer of N bytes gets timeout + N / --remote_min_rate.
Every gRPC failure is a RemoteError.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.bytestream import bytestream_pb2 as bs_pb2
from buildgrid.common.protos.google.bytestream import bytestream_pb2_grpc as bs_grpc

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest, digest_bytes
from kiln.cache.reapi import decode_action_result, encode_action_result
from kiln.cache.remote_store import RemoteError, TransferPool
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.stream_deadline import DeadlinePassed, bounded

T = TypeVar("T")

# REAPI's DigestFunction values; BLAKE3 (9) is newer than buildgrid-common's enum.
DIGEST_FUNCTIONS = {"sha256": re_pb2.DigestFunction.SHA256, "blake3": 9}
CHUNK = 1 << 20  # ByteStream chunk: what Bazel sends
_DEFAULT_BATCH = 4 << 20  # a server that advertises no limit still has gRPC's
_BATCH_OVERHEAD = 1 << 10  # the request's own fields, next to the blob
_FIND_CHUNK = 10_000  # digests per FindMissingBlobs request
_RESUMES = 5  # times a dropped stream is resumed before giving up


def to_proto(digest: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=digest.hash, size_bytes=digest.size)


def from_proto(digest: re_pb2.Digest) -> Digest:
    return Digest(digest.hash, digest.size_bytes)


def action_cache_digest(key: str, function: str = "sha256") -> Digest:
    """The REAPI action digest kiln's entry for action key `key` is stored under."""
    action = re_pb2.Action(salt=b"kiln-action-key:" + key.encode())
    return digest_bytes(action.SerializeToString(deterministic=True), function)


@dataclass(frozen=True)
class Capabilities:
    digest_functions: frozenset[int]
    max_batch: int  # bytes a BatchUpdateBlobs request may carry
    exec_enabled: bool


def describe(error: grpc.RpcError) -> str:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    name = code.name if code is not None else "error"
    return f"{name}: {details}" if details else name


class GrpcStore:
    """One REAPI server's action cache and CAS, safe to use from many threads."""

    def __init__(
        self,
        spec: ChannelSpec,
        *,
        instance_name: str = "",
        timeout: float = 60.0,
        min_rate: int = 1 << 20,
        digest_function: str = "sha256",
        jobs: int = 8,
    ) -> None:
        self.spec = spec
        self.url = spec.address
        self.instance_name = instance_name
        self.timeout = timeout
        self.min_rate = max(min_rate, 1)
        self.digest_function = digest_function
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._caps: Capabilities | None = None
        self._transfers = TransferPool(jobs, "kiln-reapi")

    # -- connection -----------------------------------------------------------------

    def channel(self) -> grpc.Channel:
        with self._lock:
            if self._channel is None:
                try:
                    self._channel = self.spec.open()
                except ValueError as e:
                    raise RemoteError(f"remote cache {self.url}: {e}") from None
            return self._channel

    def call(self, what: str, rpc: Callable[..., T], request: object, timeout: float = 0) -> T:
        """One unary call with the headers and a deadline; RemoteError on any failure.

        A server that is UNAVAILABLE (restarting, or a connection that dropped) or
        RESOURCE_EXHAUSTED (over its limit of concurrent calls: BuildGrid's "Concurrent
        RPC limit exceeded" under load) is asked again with a growing pause, for at most
        --remote_timeout in all, as Bazel's RemoteRetrier does. Every call kiln makes is
        idempotent (lookups, uploads of content-addressed blobs)."""
        retry = _Backoff(self.timeout)
        while True:
            try:
                return rpc(request, timeout=timeout or self.timeout, metadata=self.spec.metadata)
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code not in _RETRIED or not retry.wait():
                    raise RemoteError(f"remote cache {self.url}: {what}: {describe(e)}") from None

    def capabilities(self) -> Capabilities:
        if self._caps is None:
            stub = re_grpc.CapabilitiesStub(self.channel())
            caps = self.call(
                "GetCapabilities",
                stub.GetCapabilities,
                re_pb2.GetCapabilitiesRequest(instance_name=self.instance_name),
            )
            cache = caps.cache_capabilities
            functions = frozenset(cache.digest_function)  # `digest_functions` in REAPI 2.3
            if DIGEST_FUNCTIONS[self.digest_function] not in functions:
                offered = ", ".join(
                    re_pb2.DigestFunction.Value.Name(f) if f in (1, 2, 3, 4, 5, 6, 7) else str(f)
                    for f in sorted(functions)
                )
                raise RemoteError(
                    f"remote cache {self.url} does not take --digest_function="
                    f"{self.digest_function} (it offers {offered or 'none'})"
                )
            self._caps = Capabilities(
                functions,
                cache.max_batch_total_size_bytes or _DEFAULT_BATCH,
                caps.execution_capabilities.exec_enabled,
            )
        return self._caps

    def _cas(self) -> re_grpc.ContentAddressableStorageStub:
        self.capabilities()
        return re_grpc.ContentAddressableStorageStub(self.channel())

    def _transfer_timeout(self, size: int) -> float:
        return self.timeout + size / self.min_rate

    # -- the action cache -------------------------------------------------------------

    def get_action_result(self, key: str) -> ActionResult | None:
        self.capabilities()
        message = self.get_reapi_result(action_cache_digest(key, self.digest_function))
        if message is None:
            return None
        return decode_action_result(message.SerializeToString(deterministic=True))

    def get_reapi_result(self, action: Digest) -> re_pb2.ActionResult | None:
        stub = re_grpc.ActionCacheStub(self.channel())
        request = re_pb2.GetActionResultRequest(
            instance_name=self.instance_name, action_digest=to_proto(action)
        )
        try:
            found: re_pb2.ActionResult = stub.GetActionResult(
                request, timeout=self.timeout, metadata=self.spec.metadata
            )
            return found
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise RemoteError(f"remote cache {self.url}: GetActionResult: {describe(e)}") from None

    def put_action_result(self, key: str, result: ActionResult) -> None:
        self.capabilities()
        message = re_pb2.ActionResult.FromString(encode_action_result(result))
        stub = re_grpc.ActionCacheStub(self.channel())
        request = re_pb2.UpdateActionResultRequest(
            instance_name=self.instance_name,
            action_digest=to_proto(action_cache_digest(key, self.digest_function)),
            action_result=message,
        )
        self.call("UpdateActionResult", stub.UpdateActionResult, request)

    # -- the CAS -----------------------------------------------------------------------

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        unique = [d for d in dict.fromkeys(digests) if d.size]  # the empty blob is everywhere
        stub = self._cas()
        missing: list[Digest] = []
        for start in range(0, len(unique), _FIND_CHUNK):
            request = re_pb2.FindMissingBlobsRequest(
                instance_name=self.instance_name,
                blob_digests=[to_proto(d) for d in unique[start : start + _FIND_CHUNK]],
            )
            answer = self.call("FindMissingBlobs", stub.FindMissingBlobs, request)
            missing += [from_proto(d) for d in answer.missing_blob_digests]
        return missing

    def upload(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        path = cas.path(digest, executable)
        if not cas.has(digest, executable):
            path = cas.path(digest, not executable)
        self.upload_file(digest, path)

    def upload_file(self, digest: Digest, path: Path) -> None:
        if digest.size == 0:
            return
        if digest.size + _BATCH_OVERHEAD <= self.capabilities().max_batch:
            self.upload_bytes(digest, path.read_bytes())
        else:
            self._write_stream(digest, path)

    def upload_bytes(self, digest: Digest, data: bytes) -> None:
        """Send a small blob held in memory (an encoded Command, Action, Directory)."""
        if digest.size == 0:
            return
        if digest.size + _BATCH_OVERHEAD > self.capabilities().max_batch:
            raise RemoteError(f"blob {digest} is over the server's batch limit")
        request = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance_name)
        request.requests.add(digest=to_proto(digest), data=data)
        answer = self.call(
            "BatchUpdateBlobs",
            self._cas().BatchUpdateBlobs,
            request,
            self._transfer_timeout(digest.size),
        )
        for response in answer.responses:
            if response.status.code != 0:
                raise RemoteError(
                    f"remote cache {self.url}: BatchUpdateBlobs refused {digest}: "
                    f"{response.status.message or response.status.code}"
                )

    def _resource(self, digest: Digest, upload: str = "") -> str:
        parts = [self.instance_name] if self.instance_name else []
        if upload:
            parts += ["uploads", upload]
        if self.digest_function == "blake3":
            parts.append("blake3")
        parts += ["blobs", digest.hash, str(digest.size)]
        return "/".join(parts)

    def _write_stream(self, digest: Digest, path: Path) -> None:
        stub = bs_grpc.ByteStreamStub(self.channel())
        name = self._resource(digest, upload=str(uuid.uuid4()))
        offset = 0
        for attempt in range(_RESUMES + 1):
            try:
                answer = stub.Write(
                    _chunks(path, name, offset, digest.size),
                    timeout=self._transfer_timeout(digest.size - offset),
                    metadata=self.spec.metadata,
                )
            except grpc.RpcError as e:
                resumable = isinstance(e, grpc.Call) and e.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.ABORTED,
                    grpc.StatusCode.INTERNAL,
                )
                if not resumable or attempt == _RESUMES:
                    raise RemoteError(
                        f"remote cache {self.url}: ByteStream.Write {digest}: {describe(e)}"
                    ) from None
                offset = self._committed(stub, name, digest)
                if offset >= digest.size:
                    return
                continue
            if answer.committed_size not in (digest.size, -1):
                raise RemoteError(
                    f"remote cache {self.url}: ByteStream.Write {digest}: the server "
                    f"committed {answer.committed_size} of {digest.size} bytes"
                )
            return

    def _committed(self, stub: bs_grpc.ByteStreamStub, name: str, digest: Digest) -> int:
        """Where a dropped upload resumes: the server's committed size (0 if it has none)."""
        try:
            status = stub.QueryWriteStatus(
                bs_pb2.QueryWriteStatusRequest(resource_name=name),
                timeout=self.timeout,
                metadata=self.spec.metadata,
            )
        except grpc.RpcError:
            # Servers that keep no partial uploads (BuildGrid among them) answer
            # NOT_FOUND or UNIMPLEMENTED: start again, unless the blob has arrived whole.
            return digest.size if not self.find_missing([digest]) else 0
        if status.complete:
            return digest.size
        # Resume where the server's bytes end; never past the blob's.
        committed: int = status.committed_size
        return min(committed, digest.size)

    def download(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Fetch the blob into cas, verified; BlobMismatch if the server's bytes are wrong."""
        if digest.size == 0:
            cas.put_stream(digest, lambda _buffer: 0, executable)
            return
        reader = _Reader(self, digest)
        cas.put_stream(digest, reader.readinto, executable)

    def read_bytes(self, digest: Digest) -> bytes:
        """A small blob's bytes, checked against its digest (a Directory, an Action)."""
        reader = _Reader(self, digest)
        data = bytearray()
        buffer = bytearray(CHUNK)
        while count := reader.readinto(memoryview(buffer)):
            data += buffer[:count]
            if len(data) > digest.size:
                break
        if digest_bytes(bytes(data), self.digest_function) != digest:
            raise BlobMismatch(f"the server's bytes for {digest} do not match it")
        return bytes(data)

    def transfer_many(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        return self._transfers.run(calls)

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
            self._caps = None
        self._transfers.close()
        if channel is not None:
            channel.close()

    def __enter__(self) -> GrpcStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(path: Path, name: str, offset: int, size: int) -> Iterator[bs_pb2.WriteRequest]:
    with path.open("rb") as f:
        f.seek(offset)
        first = True
        while True:
            data = f.read(CHUNK)
            position = offset
            offset += len(data)
            yield bs_pb2.WriteRequest(
                resource_name=name if first else "",
                write_offset=position,
                data=data,
                finish_write=offset >= size or not data,
            )
            first = False
            if offset >= size or not data:
                return


# What a unary call retries: the server will answer later.
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


class _Backoff:
    """Pauses of 0.2 s, doubling to 2 s, until `budget` seconds have passed."""

    def __init__(self, budget: float) -> None:
        self.deadline = time.monotonic() + budget
        self.pause = 0.2

    def wait(self) -> bool:
        """Sleep before the next try; False when the budget is spent."""
        if time.monotonic() + self.pause > self.deadline:
            return False
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, 2.0)
        return True


# Streams a Read may outlive its deadline (ended by this side) and resume after.
_STUCK_RESUMES = 2


class _Reader:
    """A ByteStream.Read as a readinto() for ContentStore.put_stream, resumed at the
    offset reached when the stream drops."""

    def __init__(self, store: GrpcStore, digest: Digest) -> None:
        self.store = store
        self.digest = digest
        self.offset = 0
        self.retry = _Backoff(store.timeout)
        self.pending = b""
        self.stream: Iterator[bs_pb2.ReadResponse] | None = None
        self.stuck = 0  # streams this side ended past their deadline (stream_deadline.py)

    def _open(self) -> Iterator[bs_pb2.ReadResponse]:
        stub = bs_grpc.ByteStreamStub(self.store.channel())
        request = bs_pb2.ReadRequest(
            resource_name=self.store._resource(self.digest), read_offset=self.offset
        )
        deadline = self.store._transfer_timeout(self.digest.size - self.offset)
        call = stub.Read(request, timeout=deadline, metadata=self.store.spec.metadata)
        return bounded(call, deadline)

    def _next(self) -> bytes | None:
        """The next chunk; None at the stream's end."""
        while True:
            if self.stream is None:
                self.stream = self._open()
            try:
                return next(self.stream).data
            except StopIteration:
                return None
            except DeadlinePassed:
                self.stream = None
                self.stuck += 1
                if self.stuck <= _STUCK_RESUMES:
                    continue  # the transport, not the server: a new stream at the offset
                raise RemoteError(
                    f"remote cache {self.store.url}: ByteStream.Read {self.digest}: "
                    f"{self.stuck} streams past their deadline"
                ) from None
            except grpc.RpcError as e:
                self.stream = None
                code = e.code() if isinstance(e, grpc.Call) else None
                resumable = (*_RETRIED, grpc.StatusCode.INTERNAL)
                if code in resumable and self.retry.wait():
                    continue  # at the offset reached
                if code == grpc.StatusCode.DATA_LOSS:  # the server's copy is damaged
                    raise BlobMismatch(
                        f"the server's copy of {self.digest} is damaged: {describe(e)}"
                    ) from None
                raise RemoteError(
                    f"remote cache {self.store.url}: ByteStream.Read {self.digest}: {describe(e)}"
                ) from None

    def readinto(self, view: memoryview) -> int:
        while not self.pending:
            chunk = self._next()
            if chunk is None:
                return 0
            self.pending = chunk
            self.offset += len(chunk)
        count = min(len(view), len(self.pending))
        view[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count
