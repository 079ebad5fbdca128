"""A persistent worker dies with the kiln that started it, and so does every process its
action started: after kill -9 of kiln, nothing runs on into an execroot nobody reads."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from test_worker_crashes import eventually, running
from worker_helpers import MakeExecroot

# Runs in the worker: starts a child, says both pids, then works "forever".
ACTION = """
    import os, subprocess, sys, time
    child = subprocess.Popen(["sleep", "60"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getppid()} {child.pid}")  # the worker, the child
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(60)
"""

# kiln's process as far as workers go: a pool running that action, as the executor's is.
KILN = """
    import sys
    from kiln.workers import WorkerPool, WorkRequest
    root, pids = sys.argv[1], sys.argv[2]
    argv = (sys.executable, "-m", "kiln_test_action", pids)
    request = WorkRequest(argv, {"PATH": "/usr/bin:/bin"}, root, root + ".out", root + ".err")
    WorkerPool(sys.executable, max_instances=1, preload=()).run(request)
"""


def test_kill_9_of_kiln_during_a_worker_action_kills_the_worker_and_its_child(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    root = make_execroot(ACTION)
    pids = tmp_path / "pids"
    kiln = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILN), str(root.path), str(pids)]
    )
    started: list[int] = []
    try:
        assert eventually(pids.exists, timeout=30), "the action never started"
        started = [int(pid) for pid in pids.read_text().split()]
        worker, child = started
        assert running(worker) and running(child)
        kiln.send_signal(signal.SIGKILL)
        kiln.wait()
        # The lifeline's end of file wakes the worker at once; the bound only ends a test
        # that fails: a loaded machine (two suites at once) took more than a second.
        assert eventually(lambda: not running(worker) and not running(child), timeout=60), (
            f"worker {worker} running: {running(worker)}, its child {child}: {running(child)}"
        )
    finally:
        kiln.kill()
        for pid in started:  # by pid, and only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
