"""Streams ended by kiln past their deadline (kiln.reapi.stream_deadline): seen after a
server restart, a stream whose deadline gRPC never enforced kept a build waiting for 46
minutes. The calls here are stand-ins for grpc's: they block as a stuck stream does, and
end as grpc's Python layer ends a call cancelled from the client's side."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from buildgrid.common.protos.google.bytestream import bytestream_pb2 as bs_pb2
from kiln.cache.cas import ContentStore
from kiln.cache.digest import digest_bytes
from kiln.reapi import store as store_module
from kiln.reapi import stream_deadline
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.store import GrpcStore
from kiln.reapi.stream_deadline import DeadlinePassed, bounded


class _Ended(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name

    def initial_metadata(self) -> None: ...
    def trailing_metadata(self) -> None: ...
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None: ...
    def add_callback(self, callback: object) -> bool:
        return False


class _Call:
    """A server stream: `messages`, then either its end, or (stuck) nothing until it is
    cancelled."""

    def __init__(self, messages: list[Any], stuck: bool) -> None:
        self.messages, self.stuck = list(messages), stuck
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.messages:
            return self.messages.pop(0)
        if self.stuck:
            self.cancelled.wait(30)
        if self.cancelled.is_set():
            raise _Ended(grpc.StatusCode.CANCELLED)
        raise StopIteration

    def cancel(self) -> bool:
        self.cancelled.set()
        return True


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_deadline, "GRACE_S", 0.05)


def test_a_stream_silent_past_its_deadline_is_ended_as_a_deadline_would() -> None:
    call = _Call(["first"], stuck=True)
    got = []
    with pytest.raises(DeadlinePassed) as ended:
        for message in bounded(call, 0.05):
            got.append(message)
    assert got == ["first"]  # what came before the silence is kept
    # read as a real call's error is (isinstance grpc.Call, then code())
    assert isinstance(ended.value, grpc.Call)
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert call.cancelled.is_set()


def test_a_stream_that_ends_or_fails_by_itself_is_left_alone() -> None:
    call = _Call(["a", "b"], stuck=False)
    assert list(bounded(call, 0.05)) == ["a", "b"]
    threading.Event().wait(0.2)  # past deadline and grace: the timer was stopped
    assert not call.cancelled.is_set()

    class Failing(_Call):
        def __next__(self) -> Any:
            raise _Ended(grpc.StatusCode.UNAVAILABLE)

    with pytest.raises(grpc.RpcError) as failed:
        list(bounded(Failing([], stuck=False), 5.0))
    assert not isinstance(failed.value, DeadlinePassed)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_read_whose_stream_got_stuck_resumes_on_a_new_stream_at_its_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = b"0123456789" * 100
    reads: list[int] = []  # the offset each Read asked for

    class Stub:
        def __init__(self, channel: object) -> None: ...

        def Read(self, request: Any, **_: Any) -> _Call:
            reads.append(request.read_offset)
            if len(reads) == 1:  # the first stream: half the blob, then silence
                return _Call([bs_pb2.ReadResponse(data=blob[:500])], stuck=True)
            return _Call([bs_pb2.ReadResponse(data=blob[request.read_offset :])], stuck=False)

    monkeypatch.setattr(store_module.bs_grpc, "ByteStreamStub", Stub)
    store = GrpcStore(ChannelSpec.parse("grpc://127.0.0.1:1"), timeout=0.05)
    try:
        assert store.read_bytes(digest_bytes(blob)) == blob
        cas = ContentStore(tmp_path)
        reads.clear()
        store.download(digest_bytes(blob), cas)
        assert cas.has(digest_bytes(blob))
    finally:
        store.close()
    assert reads == [0, 500]
