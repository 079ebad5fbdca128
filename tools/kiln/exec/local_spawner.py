"""Running a command as a child process in its execroot.

Each child gets its own process group, so Ctrl-C and timeouts can stop the
action with everything it started, and kiln's own signal handling is not
disturbed by the child's. A Python action's symbolic interpreter is this
build's (`python`, given at construction).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnRequest, SpawnResult, resolve_argv


class LocalSpawner:
    def __init__(self, python: str) -> None:
        self._python = python
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._cancelled = False

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        start = time.monotonic()
        if self._cancelled:
            return SpawnResult(-1, 0.0, Source.RAN_LOCALLY, crashed=True, message="interrupted")
        argv = resolve_argv(request.argv, self._python)
        with request.stdout.open("wb") as out, request.stderr.open("wb") as err:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=request.execroot,
                    env=dict(request.env),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"cannot run {argv[0]}: {error.strerror}"
                return SpawnResult(127, 0.0, Source.RAN_LOCALLY, message=message)
            with self._lock:
                self._running[process.pid] = process
                if self._cancelled:  # Ctrl-C came while it started: it goes too
                    _kill_group(process)
            try:
                try:
                    code = process.wait(timeout=request.timeout)
                except subprocess.TimeoutExpired:
                    _kill_group(process)
                    process.wait()
                    return SpawnResult(
                        -1,
                        time.monotonic() - start,
                        Source.RAN_LOCALLY,
                        message=f"timed out after {request.timeout:g} s",
                    )
            finally:
                with self._lock:
                    self._running.pop(process.pid, None)
        seconds = time.monotonic() - start
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return SpawnResult(
                code, seconds, Source.RAN_LOCALLY, crashed=True, message=f"killed by signal {name}"
            )
        return SpawnResult(code, seconds, Source.RAN_LOCALLY)

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            running = list(self._running.values())
        for process in running:
            _kill_group(process)

    def close(self) -> None:
        self.cancel_all()  # nothing runs at the end of a build; after Ctrl-C, nothing may


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
