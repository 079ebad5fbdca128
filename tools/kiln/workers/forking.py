"""Each action of a worker in a child forked from the worker's pristine state.

    status = run_forked(request, baseline)   # in the worker, for every request

The worker imports its preload modules (torch) once and then runs nothing itself:
each action runs in a fork of it (inprocess.run_request, in the child), so what an
action does to the interpreter (a model module that patches torch at import, the
pytree node types a library registers, any global of a preloaded library) dies with
its child, and the next action starts from the same state as the first (issue 20:
one target's import-time patch of torch changed another target's cached weights).
Restoring state in place (isolation.py) cannot reach a library's globals; a fresh
interpreter pays the import of torch (1.5-2 s) per action. A fork costs about 10 ms
with torch imported (bench/bench_worker_isolation.py; docs/design.md, "Persistent
workers").

The worker is a child subreaper (kiln.process_tree): what the action left running,
in its process group or in a session of its own (`setsid`), is below the worker
once the child has ended, and is killed before the reply goes back.

Forking the worker is safe because it has run nothing: torch's OpenMP threads do
not exist yet (a child forked after they do hangs in its first parallel region),
and the worker's one thread of its own (the lifeline watchdog) holds no lock. An
action that needs a child of its own (validation: a package that aborts must kill a
child, not the action) gets it forked from itself (fork_server.current()), before
it has run torch: the same pristine state.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kiln import fork_server, process_tree
from kiln.workers.inprocess import SetupError, run_request
from kiln.workers.isolation import Baseline
from kiln.workers.protocol import WorkRequest


def run_forked(request: WorkRequest, baseline: Baseline) -> dict[str, Any]:
    """Run the request in a child; the reply frame: its exit status (-N: killed by signal
    N, with an error naming it), or the error that kept it from starting."""
    sys.stdout.flush()
    sys.stderr.flush()
    errors, error_end = os.pipe()  # the child's SetupError, if any
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the action's child; it ends in os._exit
        os.close(errors)
        os._exit(_child(request, baseline, error_end))
    os.close(error_end)
    try:
        _, status = os.waitpid(pid, 0)
        process_tree.kill_descendants()
        with os.fdopen(errors, "rb", closefd=False) as pipe:
            error = pipe.read().decode(errors="replace")
    finally:
        os.close(errors)
    code = os.waitstatus_to_exitcode(status)
    if error:
        return {"exit_code": 1, "error": error}
    if code < 0:
        return {"exit_code": code, "error": f"killed by signal {_signal_name(-code)}"}
    return {"exit_code": code}


def _child(request: WorkRequest, baseline: Baseline, errors: int) -> int:  # pragma: no cover
    code = 1
    try:
        os.set_inheritable(errors, False)
        fork_server.ForkServer.started = _ForkHere()
        code = run_request(request, baseline)
        atexit._run_exitfuncs()  # as the interpreter does at exit; the child ends in _exit
    except SetupError as error:
        os.write(errors, str(error).encode())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
    return code


class _ForkHere(fork_server.ForkServer):
    """fork_server.current() in an action's child: children forked from the action itself,
    which is still in the worker's pristine state when it asks (before it runs torch)."""

    def __init__(self) -> None:
        super().__init__(os.getpid(), None)  # type: ignore[arg-type]  # no server socket

    def run(
        self,
        module: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdio: tuple[int, int, int],
    ) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - ends in os._exit
            fds = [os.dup(fd) for fd in stdio]
            request = {"module": module, "argv": list(argv), "env": dict(env), "cwd": cwd}
            fork_server._child(request, fds, parent)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)


def _signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.valid_signals() else str(number)
