"""kiln's side of the sandbox: sandbox hosts (host.py) that run commands, workers in them.

    sandbox = Sandbox.start(python, config)    # SandboxUnavailable if namespaces are not
    run = sandbox.run(argv, env, cwd, stdout, stderr, binds, timeout)
    sandbox.worker_argv(...)                   # the command that starts a worker in one
    sandbox.close()

A host runs one command at a time, so run() takes an idle one, or starts
another (about 50 ms, once per command running at once: --jobs of them at
most); start() starts the first, which is how kiln learns whether the kernel
makes the namespaces. run() is thread-safe. A timeout or cancel_all() asks
the host to kill the command's process group; the host alone reaps, so it
never signals a pid that was reused. Each host holds a lifeline pipe kiln
never writes (as workers do): at its end it kills what runs and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.sandbox.view import Bind, SandboxConfig
from kiln.workers.protocol import ProtocolError, read_frame, write_frame


class SandboxUnavailable(KilnError):
    """User and mount namespaces cannot be made here: actions run without a sandbox."""


@dataclass(frozen=True)
class SandboxRun:
    exit_code: int  # -N: killed by signal N; 127: never started
    seconds: float
    message: str = ""  # why it never started, or "timed out after 5 s", "interrupted"


class Sandbox:
    def __init__(
        self, python: str, config: SandboxConfig, first: _Host, detached: bool = False
    ) -> None:
        self.python = python
        self.config = config
        self.detached = detached
        self._lock = threading.Lock()
        self._idle = [first]
        self._all = [first]
        self._cancelled = False
        self._closed = False

    @staticmethod
    def start(python: str, config: SandboxConfig, *, detached: bool = False) -> Sandbox:
        """Start the first host; SandboxUnavailable (with the kernel's reason) if it cannot
        make its namespaces.

        `detached`: each host is nobody's child (it forks away from the process that
        starts it), for a Ray worker: a forced ray.cancel kills the worker and its
        children, and a killed host would leave its command running in the command's
        own session. A detached host outlives the worker just long enough to see its
        lifeline end, and kills the command's group."""
        return Sandbox(python, config, _Host.start(python, config, detached), detached)

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
        try:
            host = self._acquire()
        except SandboxUnavailable as unavailable:  # a later host failed where the first did not
            return SandboxRun(127, 0.0, f"cannot start a sandbox: {unavailable.message}")
        if host is None:
            return SandboxRun(-9, 0.0, "interrupted")
        message: dict[str, Any] = {
            "op": "spawn",
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "binds": [b.to_json() for b in binds],
        }
        healthy = False
        try:
            status, error = host.run(message, timeout, lambda: self._cancelled)
            healthy = error != _DIED
        finally:
            self._release(host, healthy)
        seconds = time.monotonic() - start
        if error == _TIMED_OUT:
            return SandboxRun(-9, seconds, f"timed out after {timeout:g} s")
        if error:
            return SandboxRun(127, seconds, error)
        assert status is not None
        if self._cancelled and status < 0:
            return SandboxRun(status, seconds, "interrupted")
        return SandboxRun(status, seconds)

    def worker_argv(
        self, worker: Sequence[str], request_fd: int, response_fd: int, lifeline_fd: int
    ) -> list[str]:
        """The command that starts `worker` (kiln.workers.main, on these descriptors) in a
        sandbox host of its own, which remakes its view for each request (host.py)."""
        return [
            *_host_argv(self.python, self.config, request_fd, response_fd, lifeline_fd),
            "--",
            *worker,
        ]

    def cancel_all(self) -> None:
        """Ctrl-C: kill every command that runs; later run() calls return at once."""
        with self._lock:
            self._cancelled = True
            hosts = list(self._all)
        for host in hosts:
            host.kill_running()

    def close(self) -> None:
        """Stop every host (each kills what still runs). Idempotent."""
        with self._lock:
            self._closed = True
            hosts, self._all, self._idle = self._all, [], []
        for host in hosts:
            host.close()

    def _acquire(self) -> _Host | None:
        with self._lock:
            if self._cancelled or self._closed:
                return None
            if self._idle:
                return self._idle.pop()
        host = _Host.start(self.python, self.config, self.detached)
        with self._lock:
            self._all.append(host)
        return host

    def _release(self, host: _Host, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed:
                self._idle.append(host)
                return
            if host in self._all:
                self._all.remove(host)
        host.close()


_DIED = "the sandbox host died"
_TIMED_OUT = "timed out"


class _Host:
    """One host process running commands, one at a time."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        requests: int,
        responses: int,
        lifeline: int,
        pidfd: int | None = None,
    ) -> None:
        self._process = process  # a detached host's launcher, which has exited
        self._pidfd = pidfd  # a detached host's, which kiln cannot wait for
        self._requests = requests
        self._responses = responses
        self._lifeline = lifeline
        self._next = 0
        self._running: int | None = None  # the request id of the command that runs
        self._kill_lock = threading.Lock()  # kill requests come from other threads
        self._write_lock = threading.Lock()  # one frame at a time on the request pipe
        self._closed = False

    @staticmethod
    def start(python: str, config: SandboxConfig, detached: bool = False) -> _Host:
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        argv = _host_argv(python, config, request_r, response_w, lifeline_r)
        if detached:
            argv += ["--detach", "1"]
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
            raise SandboxUnavailable(f"cannot start a sandbox host: {error}") from None
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
            reason = (hello or {}).get("error") or f"the host exited with {process.returncode}"
            raise SandboxUnavailable(str(reason))
        if detached:
            process.wait()  # the launcher, gone once the host forked away
            # A pidfd, taken while the host lives: closing it never signals a reused pid.
            pidfd = os.pidfd_open(int(hello["pid"]))
            return _Host(process, request_w, response_r, lifeline_w, pidfd)
        return _Host(process, request_w, response_r, lifeline_w)

    def run(
        self, message: dict[str, Any], timeout: float | None, cancelled: Callable[[], bool]
    ) -> tuple[int | None, str]:
        """Run one command: (its status, '') or (None, why it did not run or end)."""
        self._next += 1
        ident = self._next
        try:
            self._send({**message, "id": ident})
            reply = read_frame(self._responses)
            if reply is None:
                return None, _DIED
            if "error" in reply:
                return None, str(reply["error"])
            with self._kill_lock:
                self._running = ident
            if cancelled():  # Ctrl-C came while it started: it goes too
                self.kill_running()
            deadline = None if timeout is None else time.monotonic() + timeout
            reply = self._next_reply(deadline)
            if reply is None:  # past the deadline
                self.kill_running()
                reply = self._next_reply(None)
                return None, _TIMED_OUT if reply is not None else _DIED
            return int(reply["status"]), ""
        except (OSError, ProtocolError, KeyError, ValueError):
            return None, _DIED
        finally:
            with self._kill_lock:
                self._running = None

    def kill_running(self) -> None:
        with self._kill_lock:
            if self._running is not None and not self._closed:
                with contextlib.suppress(OSError):  # the host is gone: so is the command
                    self._send({"op": "kill", "id": self._running})

    def close(self) -> None:
        with self._kill_lock, self._write_lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._requests)  # its end of file: the host exits
        if self._pidfd is not None:
            if not _ended(self._pidfd, 5.0):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                _ended(self._pidfd, None)
            os.close(self._pidfd)
        else:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        os.close(self._responses)
        os.close(self._lifeline)

    def _send(self, message: dict[str, Any]) -> None:
        with self._write_lock:  # a kill from another thread never lands inside a frame
            write_frame(self._requests, message)

    def _next_reply(self, deadline: float | None) -> dict[str, Any] | None:
        """The next frame ({"status": ...}); None past the deadline (or at the host's end
        of file)."""
        if deadline is not None:
            remaining = max(0.0, deadline - time.monotonic())
            poller = select.poll()
            poller.register(self._responses, select.POLLIN)
            if not poller.poll(int(remaining * 1000) + 1):
                return None
        return read_frame(self._responses)


def _ended(pidfd: int, timeout: float | None) -> bool:
    """Whether the process of `pidfd` ended within `timeout` seconds (None: waits)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else int(timeout * 1000)))


def _host_argv(
    python: str, config: SandboxConfig, request_fd: int, response_fd: int, lifeline_fd: int
) -> list[str]:
    return [
        python,
        "-m",
        "kiln.sandbox.host",
        "--request-fd",
        str(request_fd),
        "--response-fd",
        str(response_fd),
        "--lifeline-fd",
        str(lifeline_fd),
        "--config",
        json.dumps(config.to_json()),
    ]
