"""Running an action's command on a worker node so that nothing outlives its Ray task.

Ray kills a task's worker process on `ray.cancel(force=True)` (Ctrl-C on the
driver) or when its node goes, but not what that process started: a
genrule's bash would die and its children run on (seen with Ray 2.60). So
the command runs under a small supervisor, `python -I -S -c SUPERVISOR`: the
leader of a new process group holding the read end of a lifeline pipe whose
write end only the Ray worker has (the same design as kiln's persistent
workers, workers/main.py). When the worker dies, however it dies, the pipe
reaches end of file and the supervisor kills its process group: the command
and everything it started. `-I -S` keeps the supervisor's start-up to a few
milliseconds and the user's site-packages out of it; the command itself gets
exactly the action's environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SUPERVISOR = r"""
import os, signal, subprocess, sys, threading
lifeline = int(sys.argv[1])
def watch():
    try:
        while os.read(lifeline, 1):
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
try:
    child = subprocess.Popen(sys.argv[2:])
except OSError as error:
    print(f"cannot run {sys.argv[2]}: {error.strerror}", file=sys.stderr)
    sys.exit(127)
code = child.wait()
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


@dataclass(frozen=True)
class Ended:
    exit_code: int
    seconds: float
    crashed: bool = False
    message: str = ""


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout: Path,
    stderr: Path,
    timeout: float | None,
) -> Ended:
    """Run argv to its end under the supervisor; a timeout kills its whole group."""
    start = time.monotonic()
    lifeline_r, lifeline_w = os.pipe()  # both ends close-on-exec: only the supervisor gets r
    try:
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(lifeline_r), *argv],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(lifeline_r,),
                start_new_session=True,
            )
            os.close(lifeline_r)
            lifeline_r = -1
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
                return Ended(-1, time.monotonic() - start, message=f"timed out after {timeout:g} s")
            except BaseException:  # a soft ray.cancel: KeyboardInterrupt in the task
                _kill_group(process.pid)
                process.wait()
                raise
    finally:
        if lifeline_r >= 0:
            os.close(lifeline_r)
        os.close(lifeline_w)
    seconds = time.monotonic() - start
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return Ended(code, seconds, crashed=True, message=f"killed by signal {name}")
    return Ended(code, seconds)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
