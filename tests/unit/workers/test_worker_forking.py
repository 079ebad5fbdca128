"""Each action of a worker runs in a fork of the worker's pristine state (kiln.workers.
forking): what it changes in a preloaded library, and what it leaves running, in a
session of its own too, ends with it (issue 20)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kiln.workers import WorkerPool, WorkResponse
from test_worker_crashes import running
from worker_helpers import MakeExecroot


def test_a_patch_of_a_preloaded_library_is_not_seen_by_the_next_action(
    make_execroot: MakeExecroot,
) -> None:
    patch = make_execroot("import json; json.dumps = lambda *a, **k: 'patched'")
    probe = make_execroot("import json; print(json.dumps([1]))")
    with WorkerPool(sys.executable, max_instances=1, preload=("json",)) as pool:
        assert pool.run(patch.request()) == WorkResponse(0)
        assert pool.run(probe.request()) == WorkResponse(0)
    assert probe.out() == "[1]\n"


def test_a_daemon_in_a_session_of_its_own_is_killed_when_its_action_ends(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import subprocess
        daemon = subprocess.Popen(["sleep", "60"], start_new_session=True)
        print(daemon.pid)
    """)
    start = time.monotonic()
    assert pool.run(root.request()) == WorkResponse(0)
    assert time.monotonic() - start < 10
    assert not running(int(root.out()))


def test_atexit_handlers_run_when_the_action_ends(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import atexit, os
        path = os.path.abspath("at-exit")
        atexit.register(lambda: open(path, "w").close())
    """)
    assert pool.run(root.request()) == WorkResponse(0)
    assert Path(root.path / "at-exit").exists()
