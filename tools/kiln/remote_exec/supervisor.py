"""Running an action's command on a worker node so that nothing outlives its Ray task.

Ray kills a task's worker process on `ray.cancel(force=True)` (Ctrl-C on the
driver) or when its node goes, and on a cancel the worker's direct children
too, but not what they started: a genrule's bash would die and its children
run on (seen with Ray 2.60). So the command runs under a small supervisor,
`python -I -S -c SUPERVISOR`, that is nobody's child: it forks away from the
launcher the worker starts (which exits at once) into a session of its own,
and leads the process group its command runs in. It holds the read end of a
lifeline pipe whose write end only the Ray worker has (the design of kiln's
persistent workers, workers/main.py): when the worker dies, however it dies,
the pipe reaches end of file and the supervisor kills its process group, the
command and everything it started. It reports on a status pipe: its pid
first, the command's end last. `-I -S` keeps its start-up to a few
milliseconds and the user's site-packages out of it; the command itself gets
exactly the action's environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.exec.local_spawner import LocalSpawner
from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnRequest, SpawnResult, resolve_argv

if TYPE_CHECKING:
    from kiln.sandbox.client import Sandbox

SUPERVISOR = r"""
import os, signal, subprocess, sys, threading
lifeline, status = int(sys.argv[1]), int(sys.argv[2])
if os.fork():
    os._exit(0)  # the launcher: its child is now nobody's but init's
os.setsid()
os.write(status, b"%d\n" % os.getpid())
def watch():
    try:
        while os.read(lifeline, 1):
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
try:
    child = subprocess.Popen(sys.argv[3:])
except OSError as error:
    print(f"cannot run {sys.argv[3]}: {error.strerror}", file=sys.stderr)
    os.write(status, b"exit 127\n")
    sys.exit(127)
code = child.wait()
os.write(status, (b"signal %d\n" % -code) if code < 0 else (b"exit %d\n" % code))
"""
_SUPERVISOR_START_S = 30.0  # for the supervisor to report its pid (a loaded machine)


class SupervisorSpawner:
    """The Spawner (exec/spawn.py) of a worker node's plain commands: each under the
    supervisor. With a sandbox, the sandbox host starts the command instead: it holds a
    lifeline of its own (sandbox/client.py), and on a node it is started detached, nobody's
    child, so a cancel that kills the Ray worker's children leaves it to kill the command."""

    def __init__(self, python: str, sandbox: Sandbox | None = None) -> None:
        self._python = python
        self._sandboxed = None if sandbox is None else LocalSpawner(python, sandbox)

    @property
    def sandboxed(self) -> bool:
        return self._sandboxed is not None

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        if self._sandboxed is not None:
            ran = self._sandboxed.spawn(request)
            return dataclasses.replace(ran, source=Source.RAN_REMOTELY)
        return run(
            resolve_argv(request.argv, self._python),
            cwd=request.execroot,
            env=request.env,
            stdout=request.stdout,
            stderr=request.stderr,
            timeout=request.timeout,
        )

    def cancel_all(self) -> None:
        pass  # a Ray cancel kills the worker: the lifelines take the commands with it

    def close(self) -> None:
        pass


def _ended(exit_code: int, seconds: float, crashed: bool = False, message: str = "") -> SpawnResult:
    return SpawnResult(exit_code, seconds, Source.RAN_REMOTELY, crashed=crashed, message=message)


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout: Path,
    stderr: Path,
    timeout: float | None,
) -> SpawnResult:
    """Run argv to its end under the supervisor; a timeout kills its whole group."""
    start = time.monotonic()
    lifeline_r, lifeline_w = os.pipe()  # close-on-exec: only the supervisor gets the ends
    status_r, status_w = os.pipe()
    try:
        with stdout.open("wb") as out, stderr.open("wb") as err:
            launcher = subprocess.Popen(
                [*_supervisor(lifeline_r, status_w), *argv],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(lifeline_r, status_w),
                start_new_session=True,
            )
        os.close(lifeline_r)
        os.close(status_w)
        lifeline_r = status_w = -1
        launcher.wait()
        reader = _Lines(status_r)
        first = reader.line(_SUPERVISOR_START_S)
        if first is None or not first.isdigit():
            return _ended(-1, time.monotonic() - start, True, "its supervisor did not start")
        group = int(first)
        try:
            deadline = None if timeout is None else start + timeout
            last = reader.line(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            _kill_group(group)
            return _ended(-1, time.monotonic() - start, message=f"timed out after {timeout:g} s")
        except BaseException:  # a soft ray.cancel: KeyboardInterrupt in the task
            _kill_group(group)
            raise
    finally:
        for fd in (lifeline_r, status_w, lifeline_w):
            if fd >= 0:
                os.close(fd)
        with contextlib.suppress(NameError, OSError):
            os.close(status_r)
    seconds = time.monotonic() - start
    kind, _, number = (last or "").partition(" ")
    if kind == "exit" and number.isdigit():
        return _ended(int(number), seconds)
    if kind == "signal" and number.isdigit():
        signum = int(number)
        name = signal.Signals(signum).name if signum in signal.valid_signals() else number
        return _ended(-signum, seconds, crashed=True, message=f"killed by signal {name}")
    return _ended(-1, seconds, crashed=True, message="its supervisor was killed")


def _supervisor(lifeline: int, status: int) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(lifeline), str(status)]


class _Lines:
    """Lines from a pipe, each waited for with a timeout (TimeoutError); None at its end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def line(self, timeout: float | None) -> str | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                raise TimeoutError
            data = os.read(self.fd, 4096)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
