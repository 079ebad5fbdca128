"""kiln's side of the sandbox: start the server, run commands in it, stop it.

    sandbox = Sandbox.start(python, config)    # SandboxUnavailable if namespaces are not
    run = sandbox.run(argv, env, cwd, stdout, stderr, binds, timeout)
    sandbox.worker_launcher()                  # the argv prefix that starts a worker in one
    sandbox.close()

run() is thread-safe: each call sends a spawn request and waits for its
replies, which a reader thread hands out by request id. A timeout or
cancel_all() asks the server to kill the command's process group; the
server alone reaps, so it never signals a pid that was reused. The server
holds a lifeline pipe kiln never writes (as workers do): at its end it kills
what runs and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.sandbox.view import Bind, SandboxConfig
from kiln.workers.protocol import ProtocolError, read_frame, write_frame

_START_TIMEOUT_S = 20.0


class SandboxUnavailable(KilnError):
    """User and mount namespaces cannot be made here: actions run without a sandbox."""


@dataclass(frozen=True)
class SandboxRun:
    exit_code: int  # -N: killed by signal N; 127: never started
    seconds: float
    message: str = ""  # why it never started, or "timed out after 5 s", "interrupted"


class _Pending:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.pid: int | None = None
        self.status: int | None = None
        self.error = ""


class Sandbox:
    def __init__(
        self,
        process: subprocess.Popen[bytes],
        requests: int,
        responses: int,
        lifeline: int,
        python: str,
        config: SandboxConfig,
    ) -> None:
        self._process = process
        self._requests = requests
        self._responses = responses
        self._lifeline = lifeline
        self.python = python
        self.config = config
        self._lock = threading.Lock()  # the tables below (the reader thread takes it briefly)
        self._write_lock = threading.Lock()  # one frame to the server at a time
        self._pending: dict[int, _Pending] = {}
        self._next = 0
        self._cancelled = False
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="kiln-sandbox", daemon=True)
        self._reader.start()

    @staticmethod
    def start(python: str, config: SandboxConfig) -> Sandbox:
        """Start the server; SandboxUnavailable (with the kernel's reason) if it cannot make
        its namespaces."""
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        argv = [python, "-m", "kiln.sandbox.server", "--request-fd", str(request_r)]
        argv += ["--response-fd", str(response_w), "--lifeline-fd", str(lifeline_r)]
        argv += ["--config", json.dumps(config.to_json())]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                cwd="/",
                pass_fds=(request_r, response_w, lifeline_r),
                start_new_session=True,
            )
        except OSError as error:
            for fd in (request_w, response_r, lifeline_w):
                os.close(fd)
            raise SandboxUnavailable(f"cannot start the sandbox server: {error}") from None
        finally:
            for fd in (request_r, response_w, lifeline_r):
                os.close(fd)
        try:
            hello = read_frame(response_r)
        except ProtocolError as error:
            hello = {"error": str(error)}
        if not hello or not hello.get("ready"):
            process.wait()
            for fd in (request_w, response_r, lifeline_w):
                os.close(fd)
            reason = (hello or {}).get("error") or f"the server exited with {process.returncode}"
            raise SandboxUnavailable(str(reason))
        return Sandbox(process, request_w, response_r, lifeline_w, python, config)

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path,
        binds: Sequence[Bind],
        timeout: float | None,
    ) -> SandboxRun:
        start = time.monotonic()
        pending = _Pending()
        with self._lock:
            if self._cancelled or self._closed:
                return SandboxRun(-9, 0.0, "interrupted")
            self._next += 1
            ident = self._next
            self._pending[ident] = pending
        message: dict[str, Any] = {
            "op": "spawn",
            "id": ident,
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "binds": [b.to_json() for b in binds],
        }
        try:
            self._write(message)
        except OSError:
            pending.error = "the sandbox server is gone"
            pending.event.set()
        if self._cancelled:  # Ctrl-C came while it was being sent: it goes too
            self._kill(ident)
        try:
            deadline = None if timeout is None else start + timeout
            while not pending.event.wait(None if deadline is None else deadline - time.monotonic()):
                self._kill(ident)
                pending.event.wait()
                return SandboxRun(-9, time.monotonic() - start, f"timed out after {timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(ident, None)
        seconds = time.monotonic() - start
        if pending.error:
            return SandboxRun(127, seconds, pending.error)
        assert pending.status is not None
        if self._cancelled and pending.status < 0:
            return SandboxRun(pending.status, seconds, "interrupted")
        return SandboxRun(pending.status, seconds)

    def worker_argv(
        self, worker: Sequence[str], request_fd: int, response_fd: int, lifeline_fd: int
    ) -> list[str]:
        """The command that starts `worker` (kiln.workers.main, on these descriptors) inside
        a sandbox of its own, whose view each request's binds remake (host.py)."""
        return [
            self.python,
            "-m",
            "kiln.sandbox.host",
            "--request-fd",
            str(request_fd),
            "--response-fd",
            str(response_fd),
            "--lifeline-fd",
            str(lifeline_fd),
            "--config",
            json.dumps(self.config.to_json()),
            "--",
            *worker,
        ]

    def cancel_all(self) -> None:
        """Ctrl-C: kill every command that runs; later run() calls return at once."""
        with self._lock:
            self._cancelled = True
            running = list(self._pending)
        for ident in running:
            self._kill(ident)

    def close(self) -> None:
        """Stop the server (it kills what still runs). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with self._write_lock:
            os.close(self._requests)  # its end of file: the server exits
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=5)
        os.close(self._lifeline)

    def _kill(self, ident: int) -> None:
        with contextlib.suppress(OSError):  # the server is gone: so is the command
            self._write({"op": "kill", "id": ident})

    def _write(self, message: dict[str, Any]) -> None:
        with self._write_lock:
            if self._closed:
                raise OSError("the sandbox is closed")
            write_frame(self._requests, message)

    def _read(self) -> None:
        try:
            while (message := read_frame(self._responses)) is not None:
                with self._lock:
                    pending = self._pending.get(int(message.get("id", -1)))
                if pending is None:
                    continue
                if "pid" in message:
                    pending.pid = int(message["pid"])
                    continue
                pending.error = str(message.get("error", ""))
                if "status" in message:
                    pending.status = int(message["status"])
                pending.event.set()
        except (OSError, ProtocolError):
            pass
        finally:
            os.close(self._responses)
            with self._lock:  # the server is gone: nothing will answer
                for pending in self._pending.values():
                    if not pending.event.is_set():
                        pending.error = pending.error or "the sandbox server died"
                        pending.event.set()
