"""The persistent-worker protocol: requests, responses and the frames that carry them.

The pool and a worker talk over two pipes whose descriptors the worker gets on
its command line (never fd 0, 1 or 2, which belong to the action it runs).
Each message is one frame:

    frame = length (4 bytes, big-endian, unsigned) + body (UTF-8 JSON object)

    worker -> pool, once, after preloading:   {"pid": 123, "preload_errors": {"torch": "..."}}
    pool -> worker, per action:               {"argv": [...], "env": {...}, "cwd": "...",
                                               "stdout_path": "...", "stderr_path": "...",
                                               "sandbox": [...]}  (only to a sandboxed
                                               worker's host: the action's binds, which it
                                               mounts and takes out: kiln.sandbox.host)
    worker -> pool, per action:               {"exit_code": 0}   (+ "error" if it never started)

End of file on the request pipe tells a worker to exit; end of file on the
response pipe tells the pool its worker died. JSON is written with
ensure_ascii, so environment values that are not valid UTF-8 (surrogate
escapes) survive the trip.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

_HEADER = struct.Struct(">I")
# A request is argv + env: kilobytes. Anything near this is a corrupted stream.
MAX_FRAME_BYTES = 64 * 1024 * 1024


class ProtocolError(Exception):
    """A frame that is cut short or not a JSON object: the other side is broken."""


@dataclass(frozen=True)
class WorkRequest:
    """One action for a worker: `argv` must be `[python, "-m", module, *args]`."""

    argv: tuple[str, ...]  # argv[0] (the interpreter) is ignored by the worker
    env: dict[str, str]  # the action's complete environment
    cwd: str  # the action's private execroot (absolute)
    stdout_path: str  # created or truncated by the worker
    stderr_path: str  # may equal stdout_path: both streams then share one file
    timeout: float | None = None  # seconds; enforced by the pool, not sent
    # For a worker started in a sandbox: the action's binds (kiln.sandbox.view.Bind as
    # JSON), made by the sandbox's host before the worker gets the request.
    sandbox: list[Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", dict(self.env))

    @property
    def module(self) -> str:
        """The module the action runs (`kiln.actions.x`); ValueError if argv has no -m."""
        module = worker_module(self.argv)
        if module is None:
            raise ValueError(
                f"not a worker action (expected [python, -m, module, ...]): {self.argv}"
            )
        return module

    def to_json(self) -> dict[str, Any]:
        message = {
            "argv": list(self.argv),
            "env": self.env,
            "cwd": self.cwd,
            "stdout_path": self.stdout_path,
            "stderr_path": self.stderr_path,
        }
        if self.sandbox is not None:
            message["sandbox"] = self.sandbox
        return message

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkRequest:
        return cls(
            argv=tuple(str(a) for a in data["argv"]),
            env={str(k): str(v) for k, v in data["env"].items()},
            cwd=str(data["cwd"]),
            stdout_path=str(data["stdout_path"]),
            stderr_path=str(data["stderr_path"]),
        )


@dataclass(frozen=True)
class WorkResponse:
    """How an action ended in a worker.

    When `crashed` is true the worker process died (or was killed on timeout or
    interrupt) and `exit_code` is its return code as subprocess reports it:
    7 after `os._exit(7)`, -11 after SIGSEGV, -9 after a timeout kill.
    """

    exit_code: int
    crashed: bool = False
    message: str = ""  # "worker crashed (signal 11, SIGSEGV) while running ...", "timed out ..."
    worker_id: str = field(default="", compare=False)  # "worker-2": the profile lane


def worker_module(argv: tuple[str, ...] | list[str]) -> str | None:
    """The module of an argv that a worker can run (`[python, -m, module, ...]`), else None."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] and not argv[2].startswith("-"):
        return argv[2]
    return None


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    return _HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except ValueError as e:
        raise ProtocolError(f"frame is not JSON: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame is not a JSON object: {type(message).__name__}")
    return message


def frame_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return int(length)


HEADER_BYTES = _HEADER.size


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write one whole frame to a blocking descriptor (OSError if the reader is gone)."""
    view = memoryview(encode_frame(message))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame(fd: int) -> dict[str, Any] | None:
    """Read one frame from a blocking descriptor; None on a clean end of file."""
    header = _read_exact(fd, HEADER_BYTES)
    if not header:
        return None
    if len(header) < HEADER_BYTES:
        raise ProtocolError("stream ended inside a frame header")
    length = frame_length(header)
    body = _read_exact(fd, length)
    if len(body) < length:
        raise ProtocolError(f"stream ended after {len(body)} of {length} frame bytes")
    return decode_body(body)


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
