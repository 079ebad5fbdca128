"""The frames between pool and worker: round trips, and every way a stream can be cut short."""

from __future__ import annotations

import os
import struct

import pytest
from kiln.workers.protocol import (
    MAX_FRAME_BYTES,
    ProtocolError,
    WorkRequest,
    encode_frame,
    read_frame,
    worker_module,
    write_frame,
)


def read_from_bytes(data: bytes) -> dict[str, object] | None:
    read, write = os.pipe()
    try:
        os.write(write, data)
        os.close(write)
        return read_frame(read)
    finally:
        os.close(read)


def test_request_round_trips_through_a_pipe_with_non_utf8_environment() -> None:
    request = WorkRequest(
        argv=("python", "-m", "kiln.actions.export", "spec.json"),
        env={"PATH": "/bin", "ODD": os.fsdecode(b"caf\xe9"), "EMPTY": ""},
        cwd="/execroot",
        stdout_path="/logs/out",
        stderr_path="/logs/err",
    )
    read, write = os.pipe()
    try:
        write_frame(write, request.to_json())
        message = read_frame(read)
    finally:
        os.close(read)
        os.close(write)
    assert message is not None
    assert WorkRequest.from_json(message) == request


def test_every_truncated_frame_is_an_error_and_nothing_is_a_clean_end() -> None:
    frame = encode_frame({"exit_code": 3, "error": "x" * 40})
    assert read_from_bytes(frame) == {"exit_code": 3, "error": "x" * 40}
    assert read_from_bytes(b"") is None
    for cut in range(1, len(frame)):
        with pytest.raises(ProtocolError, match="stream ended"):
            read_from_bytes(frame[:cut])


def test_frame_longer_than_the_limit_is_refused_before_reading_it() -> None:
    with pytest.raises(ProtocolError, match=f"exceeds {MAX_FRAME_BYTES}"):
        read_from_bytes(struct.pack(">I", MAX_FRAME_BYTES + 1))


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"'])
def test_frame_that_is_not_a_json_object_is_an_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        read_from_bytes(struct.pack(">I", len(body)) + body)


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (("python", "-m", "kiln.actions.export", "spec.json"), "kiln.actions.export"),
        (("/usr/bin/python3", "-m", "kiln.actions.x"), "kiln.actions.x"),
        (("python", "script.py"), None),
        (("python", "-u", "-m", "kiln.actions.x"), None),
        (("python", "-m"), None),
        (("python", "-m", "-c"), None),
    ],
)
def test_only_python_dash_m_argv_can_run_in_a_worker(
    argv: tuple[str, ...], module: str | None
) -> None:
    assert worker_module(argv) == module
