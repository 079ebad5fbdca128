"""A gRPC stream ended by this side once its deadline is past, whatever the transport does.

gRPC ends a call at its deadline. Seen on a loaded machine (grpcio 1.85): BuildGrid
restarted (its GOAWAY reached both clients) and a driver's WaitExecution stream (deadline
60 s) and a worker's ByteStream.Read both went on waiting in Python's `next()` for 46
minutes, the build with them. Cancelling a call from this side wakes its waiting thread
even where the transport never answers: grpc's Python layer marks the call done and
notifies the waiter itself. So each stream kiln reads is watched by a timer set a little
past its deadline; a stream the timer had to end raises DeadlinePassed, a grpc.RpcError
whose code() is DEADLINE_EXCEEDED, as the deadline itself should have, so the caller's
handling of a deadline (ask again, resume at the offset, fail with one error) applies.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import grpc

GRACE_S = 5.0  # past the deadline: gRPC's own expiry goes first whenever it works
T = TypeVar("T")


class DeadlinePassed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """The stream outlived its deadline by GRACE_S; this side ended it. A grpc.Call, as
    the errors of real calls are, so code() is read wherever theirs is."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no end {seconds:g} s after its deadline: cancelled by kiln")
        self.seconds = seconds

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return str(self)

    def initial_metadata(self) -> None:
        return None

    def trailing_metadata(self) -> None:
        return None

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


def bounded(call: Any, deadline_s: float) -> Iterator[T]:
    """The messages of the streaming `call` (made with timeout=deadline_s), ending in
    DeadlinePassed if it is still open GRACE_S after that."""
    fired = threading.Event()

    def end() -> None:
        fired.set()
        call.cancel()

    timer = threading.Timer(deadline_s + GRACE_S, end)
    timer.daemon = True
    timer.start()
    try:
        yield from call
    except grpc.RpcError:
        if fired.is_set():
            raise DeadlinePassed(deadline_s + GRACE_S) from None
        raise
    finally:
        timer.cancel()
