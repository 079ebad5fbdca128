"""kiln.cache.reapi: ActionResult in the REAPI encoding that Bazel's HTTP caches hold."""

from __future__ import annotations

import pytest
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from kiln.cache.action_cache import ActionResult, OutputFile
from kiln.cache.digest import digest_bytes
from kiln.cache.reapi import decode_action_result, encode_action_result

D1 = digest_bytes(b"one")
D2 = digest_bytes(b"two")
EMPTY = digest_bytes(b"")


def result() -> ActionResult:
    return ActionResult(
        output_files=(
            OutputFile("kiln-out/m/b.pt2", D2),
            OutputFile("kiln-out/m/a.so", D1, True),
        ),
        stdout_digest=EMPTY,
        stderr_digest=None,
        execution_seconds=1.25,
        worker="worker-1",
    )


def _message(**fields: object) -> re_pb2.ActionResult:
    return re_pb2.ActionResult(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field() -> None:
    decoded = decode_action_result(encode_action_result(result()))
    assert decoded.output_files == result().output_files
    assert decoded.stdout_digest == EMPTY
    assert decoded.stderr_digest is None
    assert decoded.worker == "worker-1"
    assert decoded.execution_seconds == pytest.approx(1.25)


def test_the_bytes_are_a_standard_reapi_action_result() -> None:
    message = re_pb2.ActionResult()
    message.ParseFromString(encode_action_result(result()))
    files = {
        f.path: (f.digest.hash, f.digest.size_bytes, f.is_executable) for f in message.output_files
    }
    assert files == {
        "kiln-out/m/a.so": (D1.hash, 3, True),
        "kiln-out/m/b.pt2": (D2.hash, 3, False),
    }
    assert message.stdout_digest.hash == EMPTY.hash
    assert not message.HasField("stderr_digest")
    assert message.execution_metadata.worker == "worker-1"


def _file(path: str, hash_: str = D1.hash, size: int = 3) -> re_pb2.OutputFile:
    return re_pb2.OutputFile(path=path, digest=re_pb2.Digest(hash=hash_, size_bytes=size))


@pytest.mark.parametrize(
    ("why", "message"),
    [
        ("absolute path", _message(output_files=[_file("/etc/passwd")])),
        ("escapes with ..", _message(output_files=[_file("kiln-out/../../x")])),
        ("empty path", _message(output_files=[_file("")])),
        ("bad hash", _message(output_files=[_file("kiln-out/x", "ZZ" * 32)])),
        ("short hash", _message(output_files=[_file("kiln-out/x", "ab")])),
        ("negative size", _message(output_files=[_file("kiln-out/x", D1.hash, -1)])),
        ("duplicate path", _message(output_files=[_file("kiln-out/x"), _file("kiln-out/x")])),
        ("failed action", _message(exit_code=1)),
        (
            "output directory",
            _message(output_directories=[re_pb2.OutputDirectory(path="kiln-out/d")]),
        ),
        (
            "symlink",
            _message(output_symlinks=[re_pb2.OutputSymlink(path="kiln-out/l", target="/")]),
        ),
    ],
)
def test_entries_kiln_would_not_write_are_refused(why: str, message: re_pb2.ActionResult) -> None:
    with pytest.raises(ValueError):
        decode_action_result(message.SerializeToString())


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05abc", b"not a proto at all"])
def test_garbage_is_refused_with_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_action_result(data)


def test_every_truncated_entry_decodes_or_is_refused() -> None:
    data = encode_action_result(result())
    for end in range(len(data)):
        try:
            decoded = decode_action_result(data[:end])
        except ValueError:
            continue
        # A prefix that parses is a smaller, still well-formed result.
        assert all(f in result().output_files for f in decoded.output_files)
