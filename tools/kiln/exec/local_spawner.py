"""Running a command as a child process in its execroot.

Each child gets its own process group, so Ctrl-C and timeouts can stop the
action with everything it started, and kiln's own signal handling is not
disturbed by the child's. Without a sandbox the command runs under a small
supervisor (kiln.process_tree.supervise, a child subreaper): what it left running
when it ended, a `setsid` daemon too, is killed before its outputs are read. A
Python action's symbolic interpreter is this build's (`python`, given at
construction). With a sandbox (kiln.sandbox), the sandbox host starts the command
instead, in a view of its execroot, its inputs (read-only) and the toolchain;
timeouts and Ctrl-C work the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kiln import process_tree
from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnRequest, SpawnResult, resolve_argv

if TYPE_CHECKING:
    from kiln.sandbox.client import Sandbox


class LocalSpawner:
    def __init__(self, python: str, sandbox: Sandbox | None = None) -> None:
        self._python = python
        self._sandbox = sandbox
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._cancelled = False

    @property
    def sandboxed(self) -> bool:
        """Whether its commands run in a sandbox."""
        return self._sandbox is not None

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        start = time.monotonic()
        if self._cancelled:
            return SpawnResult(-1, 0.0, Source.RAN_LOCALLY, crashed=True, message="interrupted")
        argv = resolve_argv(request.argv, self._python)
        if self._sandbox is not None:
            return self._spawn_sandboxed(self._sandbox, argv, request)
        missing = _missing_program(argv[0], request.execroot, request.env.get("PATH", os.defpath))
        if missing:
            return SpawnResult(127, 0.0, Source.RAN_LOCALLY, message=missing)
        with request.stdout.open("wb") as out, request.stderr.open("wb") as err:
            try:
                process = subprocess.Popen(
                    process_tree.supervisor_argv(sys.executable, argv),
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
            message = f"killed by signal {_signal_name(-code)}"
            return SpawnResult(code, seconds, Source.RAN_LOCALLY, crashed=True, message=message)
        return SpawnResult(code, seconds, Source.RAN_LOCALLY)

    def _spawn_sandboxed(
        self, sandbox: Sandbox, argv: tuple[str, ...], request: SpawnRequest
    ) -> SpawnResult:
        from kiln.sandbox.view import action_binds

        run = sandbox.run(
            argv,
            request.env,
            request.execroot,
            request.stdout,
            request.stderr,
            action_binds(request.execroot, request.inputs),
            request.timeout,
        )
        if run.message:
            code = 127 if run.exit_code == 127 else -1
            return SpawnResult(code, run.seconds, Source.RAN_LOCALLY, message=run.message)
        if run.exit_code < 0:
            message = f"killed by signal {_signal_name(-run.exit_code)}"
            return SpawnResult(
                run.exit_code, run.seconds, Source.RAN_LOCALLY, crashed=True, message=message
            )
        return SpawnResult(run.exit_code, run.seconds, Source.RAN_LOCALLY)

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            running = list(self._running.values())
        for process in running:
            _kill_group(process)
        if self._sandbox is not None:
            self._sandbox.cancel_all()

    def close(self) -> None:
        self.cancel_all()  # nothing runs at the end of a build; after Ctrl-C, nothing may


def _missing_program(program: str, cwd: Path, path: str) -> str:
    """Why `program` cannot be run, or "" (the supervisor would say it only on stderr)."""
    if "/" in program:
        where = cwd / program
        found = program if os.access(where, os.X_OK) and where.is_file() else None
    else:
        found = shutil.which(program, path=path)
    return "" if found else f"cannot run {program}: No such file or directory"


def _signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.valid_signals() else str(number)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
