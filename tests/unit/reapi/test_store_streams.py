"""GrpcStore's ByteStream reads against a real (in-process) gRPC server that misbehaves:
a blob whose bytes do not match its digest, and a stream that trickles (--remote_timeout,
--remote_min_rate). Neither leaves anything in the local CAS."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from buildgrid.common.protos.google.bytestream import bytestream_pb2 as bs_pb2
from buildgrid.common.protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import digest_bytes
from kiln.cache.remote_store import RemoteError
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.store import GrpcStore

BLOB = bytes(range(256)) * 256  # 64 KiB


class _ByteStream(bs_grpc.ByteStreamServicer):  # type: ignore[misc]
    def __init__(self, data: bytes, chunk: int, pause: float) -> None:
        self.data, self.chunk, self.pause = data, chunk, pause
        self.reads = 0
        self.stop = threading.Event()

    def Read(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.reads += 1
        for start in range(request.read_offset, len(self.data), self.chunk):
            if self.stop.wait(self.pause) or not context.is_active():
                return
            yield bs_pb2.ReadResponse(data=self.data[start : start + self.chunk])


def _serve(servicer: _ByteStream) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    bs_grpc.add_ByteStreamServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"grpc://127.0.0.1:{port}"


def _download(servicer: _ByteStream, cas: ContentStore, timeout: float) -> float:
    server, address = _serve(servicer)
    store = GrpcStore(ChannelSpec.parse(address), timeout=timeout, min_rate=1 << 20)
    started = time.monotonic()
    try:
        store.download(digest_bytes(BLOB), cas)
    finally:
        took = time.monotonic() - started
        servicer.stop.set()
        store.close()
        server.stop(0)
    return took


def test_a_blob_whose_bytes_do_not_match_its_digest_is_refused_and_never_stored(
    tmp_path: Path,
) -> None:
    cas = ContentStore(tmp_path)
    damaged = bytes(reversed(BLOB))  # same length, other bytes: only a hash tells
    with pytest.raises(BlobMismatch):
        _download(_ByteStream(damaged, 16384, 0.0), cas, timeout=5.0)
    assert not cas.has(digest_bytes(BLOB))
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == damaged]
    assert leftovers == []


def test_a_trickling_stream_is_given_up_after_remote_timeout_plus_size_over_min_rate(
    tmp_path: Path,
) -> None:
    cas = ContentStore(tmp_path)
    trickle = _ByteStream(BLOB, 1024, 0.2)  # 64 chunks, 12.8 s in all: 5 KiB/s
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"ByteStream\.Read"):
        _download(trickle, cas, timeout=1.0)
    # The bound: 1 s + 64 KiB at 1 MiB/s for the stream, then no budget left to resume.
    assert time.monotonic() - started < 4.0
    assert not cas.has(digest_bytes(BLOB))


def test_a_stream_within_its_bounds_is_read_whole(tmp_path: Path) -> None:
    cas = ContentStore(tmp_path)
    _download(_ByteStream(BLOB, 16384, 0.05), cas, timeout=2.0)
    assert cas.path(digest_bytes(BLOB)).read_bytes() == BLOB
