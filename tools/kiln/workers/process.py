"""One worker process as the pool sees it: start it, hand it a request, wait, kill it.

The worker runs in a session of its own (start_new_session), so a Ctrl-C at
the terminal reaches kiln only, and killing its process group (pgid == pid)
takes every process its action started along with it. The group is always
signalled before the worker is reaped: until then its pid cannot be reused.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from kiln.workers.protocol import (
    HEADER_BYTES,
    ProtocolError,
    WorkResponse,
    decode_body,
    frame_length,
    write_frame,
)

_READ_CHUNK = 64 * 1024
# How long a dead worker's sandbox host may take to end as its worker did.
_DIED_GRACE_S = 2.0
_LOG_TAIL_BYTES = 4000
_EXIT_CHECK_S = 0.2  # without a pidfd, how often a waiting pool looks at its worker
_DATA, _EXITED, _TIMEOUT = "data", "exited", "timeout"

# How a worker is started inside something (a sandbox: kiln.sandbox.client.Sandbox.
# worker_argv): (the worker's argv, its request, response and lifeline fds) -> argv.
Launcher = Callable[[list[str], int, int, int], list[str]]


class WorkerProcess:
    """A started `python -m kiln.workers.main`; one action at a time, from one thread."""

    def __init__(
        self,
        worker_id: str,
        python: str,
        preload: tuple[str, ...],
        env: dict[str, str],
        launcher: Launcher | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.hello: dict[str, Any] | None = None  # the worker's first frame, once read
        self._kill_reason: str | None = None
        self._buffer = bytearray()
        self._eof = False
        self._lock = threading.Lock()  # orders killpg before reaping
        # The worker's own stderr (preload noise, start-up failures); closed by stop().
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        # Never written: its end of file tells the worker kiln is gone (main.py).
        # The write end is close-on-exec, so no other process kiln starts holds it.
        lifeline_r, lifeline_w = os.pipe()
        argv = [python, "-m", "kiln.workers.main"]
        argv += ["--request-fd", str(request_r), "--response-fd", str(response_w)]
        argv += ["--lifeline-fd", str(lifeline_r)]
        for module in preload:
            argv += ["--preload", module]
        if launcher is not None:
            argv = launcher(argv, request_r, response_w, lifeline_r)
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env=env,
                cwd="/",  # not kiln's directory: nothing of it leaks onto the worker's sys.path
                pass_fds=(request_r, response_w, lifeline_r),
                start_new_session=True,
            )
        except BaseException:
            for fd in (request_w, response_r, lifeline_w):
                os.close(fd)
            self._log.close()
            raise
        finally:
            os.close(request_r)
            os.close(response_w)
            os.close(lifeline_r)
        self._requests: int | None = request_w
        self._responses = response_r
        self._lifeline: int | None = lifeline_w
        self.pid = self._proc.pid
        # Readable once the worker exits. The response pipe's end of file is not
        # enough: a process the action forked holds the write end as long as it lives.
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # Linux 5.3+ only
            self._pidfd = os.pidfd_open(self.pid)

    # -- one action -----------------------------------------------------------------

    def execute(self, message: dict[str, Any], module: str, timeout: float | None) -> WorkResponse:
        """Send one request and wait for its reply; a dead or killed worker is reaped."""
        try:
            if self.hello is None:
                self.hello = self._receive(None)
                if self.hello is None:
                    return self._died(module, starting=True)
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                self._send(message)
            except OSError:
                return self._died(module)  # it died while idle: the reply read sees why
            try:
                reply = self._receive(deadline)
            except TimeoutError:
                self.kill(f"timed out after {timeout:g} s")
                return WorkResponse(
                    self._reap(),
                    crashed=True,
                    message=f"timed out after {timeout:g} s",
                    worker_id=self.worker_id,
                )
        except ProtocolError as e:
            self.kill("broke the protocol")
            return WorkResponse(
                self._reap(),
                crashed=True,
                message=f"worker broke the protocol while running {module}: {e}",
                worker_id=self.worker_id,
            )
        if reply is None:
            return self._died(module)
        return WorkResponse(
            int(reply["exit_code"]),
            message=str(reply.get("error", "")),
            worker_id=self.worker_id,
        )

    def idle_and_alive(self) -> bool:
        """True unless the worker exited (or wrote something) while it had nothing to do."""
        if self._eof or self._requests is None:
            return False
        return self._wait(0.0) == _TIMEOUT

    # -- ending ---------------------------------------------------------------------

    def kill(self, reason: str) -> None:
        """SIGKILL the worker's process group; the action it runs reports `reason`."""
        with self._lock:
            if self._proc.returncode is None:
                self._kill_reason = self._kill_reason or reason
                _killpg(self.pid)

    def stop(self, grace: float) -> None:
        """Ask the worker to exit (end of its request pipe), then kill what is left."""
        self.close_requests()
        deadline = time.monotonic() + grace
        try:
            while self._receive(deadline) is not None:
                pass  # an idle worker sends nothing; wait for the end of file
        except (TimeoutError, ProtocolError):
            pass
        self._reap()
        self._log.close()

    def close_requests(self) -> None:
        if self._requests is not None:
            os.close(self._requests)
            self._requests = None

    def _reap(self, grace: float = 0.0) -> int:
        """Wait up to `grace` seconds for the process to end by itself, then kill its group
        (also whatever the action left running); its return code."""
        if grace:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(grace)
        with self._lock:
            if self._proc.returncode is None:
                _killpg(self.pid)
            returncode = self._proc.wait()
        self.close_requests()
        if self._lifeline is not None:
            os.close(self._lifeline)  # after the wait: the watchdog never races a reap
            self._lifeline = None
        for fd in (self._responses, self._pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self._responses, self._pidfd = -1, None
        self._eof = True
        return returncode

    def _died(self, module: str, *, starting: bool = False) -> WorkResponse:
        # The stream ended: the worker is dead. In a sandbox the process here is its host,
        # which ends as its worker did a moment later: killing it now would report the
        # SIGKILL instead of the worker's own signal (a SIGSEGV, say).
        returncode = self._reap(grace=0.0 if self._kill_reason else _DIED_GRACE_S)
        if self._kill_reason:
            message = f"worker {self._kill_reason} while running {module}"
        elif returncode < 0:
            message = f"worker crashed ({_signal_name(-returncode)}) while running {module}"
        else:
            message = f"worker exited with code {returncode} while running {module}"
        if starting and not self._kill_reason:
            message = f"worker failed to start (exit code {returncode})" + _tail(self._log)
        return WorkResponse(returncode, crashed=True, message=message, worker_id=self.worker_id)

    # -- frames ---------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if self._requests is None:
            raise BrokenPipeError("request pipe closed")
        write_frame(self._requests, message)

    def _receive(self, deadline: float | None) -> dict[str, Any] | None:
        """The next frame; None at end of file (the worker died); TimeoutError past deadline."""
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            if self._eof:
                return None
            timeout: float | None = None
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    raise TimeoutError
            event = self._wait(timeout)
            if event == _TIMEOUT:
                continue
            chunk = os.read(self._responses, _READ_CHUNK) if event == _DATA else b""
            if not chunk:
                self._eof = True  # a partial frame left in the buffer dies with the worker
                return None
            self._buffer += chunk

    def _wait(self, timeout: float | None) -> str:
        """_DATA (or end of file) on the response pipe, _EXITED, or _TIMEOUT."""
        poller = select.poll()  # not select(): kiln may hold more than FD_SETSIZE descriptors
        poller.register(self._responses, select.POLLIN)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        elif timeout is None or timeout > _EXIT_CHECK_S:
            timeout = _EXIT_CHECK_S  # no pidfd: look at the process now and then
        ready = {
            fd for fd, _ in poller.poll(None if timeout is None else math.ceil(timeout * 1000))
        }
        if self._responses in ready:
            return _DATA  # read what the worker wrote before anything else
        if self._pidfd in ready or (self._pidfd is None and self._has_exited()):
            return _EXITED
        return _TIMEOUT

    def _has_exited(self) -> bool:
        try:  # WNOWAIT: look, but leave reaping to _reap, after the group is killed
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _take_frame(self) -> dict[str, Any] | None:
        if len(self._buffer) < HEADER_BYTES:
            return None
        end = HEADER_BYTES + frame_length(bytes(self._buffer[:HEADER_BYTES]))
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[HEADER_BYTES:end])
        del self._buffer[:end]
        return decode_body(body)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return f"signal {number}, {signal.Signals(number).name}"
    except ValueError:
        return f"signal {number}"


def _tail(log: IO[bytes]) -> str:
    log.seek(0, os.SEEK_END)
    log.seek(max(0, log.tell() - _LOG_TAIL_BYTES))
    text = log.read().decode("utf-8", "replace").strip()
    return f":\n{text}" if text else ""
