"""Action results in the Remote Execution API's encoding, as remote caches store them.

Bazel's HTTP cache protocol keeps under `/ac/<action key>` an ActionResult
message of `build.bazel.remote.execution.v2` (REAPI), serialised as protobuf;
nginx stores it as opaque bytes, bazel-remote parses and validates it. kiln
writes the same message, so any server that serves Bazel serves kiln. The
protos come from BuildGrid's `buildgrid-common` package (generated code with
typed stubs); nothing here needs gRPC.

    kiln ActionResult                  REAPI ActionResult
    output_files[i].path               output_files[i].path
    output_files[i].digest             output_files[i].digest {hash, size_bytes}
    output_files[i].is_executable      output_files[i].is_executable
    exit_code                          exit_code (always 0: failures are never cached)
    stdout_digest, stderr_digest       stdout_digest, stderr_digest (unset: None)
    worker                             execution_metadata.worker
    execution_seconds                  execution_metadata.execution_completed_timestamp
                                         - execution_start_timestamp

Decoding reads bytes from a server, so it trusts nothing: what kiln never
writes (output directories, symlinks, a non-zero exit code) is refused, and
every path and digest goes through OutputFile and Digest, which refuse an
absolute path, a `..` segment or a malformed hash. Any refusal is a
ValueError; the caller treats it as a cache miss.
"""

from __future__ import annotations

import time

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from google.protobuf.message import DecodeError

from kiln.cache.action_cache import ActionResult, OutputFile
from kiln.cache.digest import Digest

_NANOS = 1_000_000_000


def encode_action_result(result: ActionResult) -> bytes:
    """The REAPI ActionResult message for result, serialised."""
    message = re_pb2.ActionResult(exit_code=result.exit_code)
    for output in result.output_files:
        message.output_files.add(
            path=output.path, digest=_digest(output.digest), is_executable=output.is_executable
        )
    if result.stdout_digest is not None:
        message.stdout_digest.CopyFrom(_digest(result.stdout_digest))
    if result.stderr_digest is not None:
        message.stderr_digest.CopyFrom(_digest(result.stderr_digest))
    metadata = message.execution_metadata
    metadata.worker = result.worker
    completed = time.time_ns()
    started = completed - round(result.execution_seconds * _NANOS)
    metadata.execution_start_timestamp.FromNanoseconds(started)
    metadata.execution_completed_timestamp.FromNanoseconds(completed)
    return message.SerializeToString(deterministic=True)


def decode_action_result(data: bytes) -> ActionResult:
    """Parse a serialised REAPI ActionResult; ValueError on anything kiln would not write."""
    message = re_pb2.ActionResult()
    try:
        message.ParseFromString(data)
    except (DecodeError, RecursionError) as e:
        raise ValueError(f"not a REAPI ActionResult: {e}") from None
    unsupported = [
        name
        for name in (
            "output_directories",
            "output_file_symlinks",
            "output_symlinks",
            "output_directory_symlinks",
        )
        if len(getattr(message, name))
    ]
    if unsupported:
        raise ValueError(f"action result has {', '.join(unsupported)}, which kiln never writes")
    if message.exit_code != 0:
        raise ValueError(f"action result of a failed action (exit code {message.exit_code})")
    outputs = tuple(
        OutputFile(f.path, _parse_digest(f.digest), f.is_executable) for f in message.output_files
    )
    metadata = message.execution_metadata
    nanos = (
        metadata.execution_completed_timestamp.ToNanoseconds()
        - metadata.execution_start_timestamp.ToNanoseconds()
    )
    return ActionResult(
        output_files=outputs,
        exit_code=0,
        stdout_digest=_parse_digest(message.stdout_digest)
        if message.HasField("stdout_digest")
        else None,
        stderr_digest=_parse_digest(message.stderr_digest)
        if message.HasField("stderr_digest")
        else None,
        execution_seconds=max(nanos, 0) / _NANOS,
        worker=metadata.worker,
    )


def _digest(digest: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=digest.hash, size_bytes=digest.size)


def _parse_digest(message: re_pb2.Digest) -> Digest:
    return Digest(message.hash, message.size_bytes)
