"""Running an action's argv as a child process in its execroot.

Each child gets its own process group, so Ctrl-C and timeouts can stop the
action with everything it started, and kiln's own signal handling is not
disturbed by the child's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    seconds: float
    timed_out: bool = False
    crashed: bool = False
    message: str = ""
    lane: str = ""


class LocalRunner:
    def __init__(self) -> None:
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self.cancelled = False

    def run(
        self,
        argv: tuple[str, ...],
        env: dict[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path,
        timeout: float | None,
    ) -> RunResult:
        start = time.monotonic()
        with stdout.open("wb") as out, stderr.open("wb") as err:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as error:
                return RunResult(127, 0.0, message=f"cannot run {argv[0]}: {error.strerror}")
            with self._lock:
                self._running[process.pid] = process
            try:
                try:
                    code = process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _kill_group(process)
                    process.wait()
                    return RunResult(
                        -1,
                        time.monotonic() - start,
                        timed_out=True,
                        message=f"timed out after {timeout:g} s",
                    )
            finally:
                with self._lock:
                    self._running.pop(process.pid, None)
        seconds = time.monotonic() - start
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return RunResult(code, seconds, crashed=True, message=f"killed by signal {name}")
        return RunResult(code, seconds)

    def kill_all(self) -> None:
        """Ctrl-C: stop every running action and what it started."""
        self.cancelled = True
        with self._lock:
            running = list(self._running.values())
        for process in running:
            _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
