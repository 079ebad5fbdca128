"""A persistent worker in a sandbox: one view, remade for each action by its host.

The worker keeps its interpreter (and torch) between actions; what it sees
must still be exactly the current action's: its inputs, read-only, a /tmp of
its own, nothing an earlier action declared.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kiln.sandbox.client import Sandbox
from kiln.sandbox.view import action_binds
from kiln.workers import WorkerPool, WorkRequest, WorkResponse

from tests.unit.sandbox.conftest import Layout

# The action: prints what it finds, as JSON-ish lines the tests read.
ACTION = """
import os, sys
workspace = sys.argv[1]
print("pid", os.getppid())  # the worker: each action is a fork of it
print("tmp", sorted(os.listdir("/tmp")))
for name in sys.argv[2:]:
    print(name, os.path.exists(os.path.join(workspace, name)))
try:
    open("act.py", "a").write("#")
except OSError as e:
    print("write", e.strerror)
open("/tmp/left-by-" + str(os.getpid()), "w").close()
"""


@pytest.fixture
def pool(sandbox: Sandbox) -> Iterator[WorkerPool]:
    workers = WorkerPool(sys.executable, max_instances=1, preload=(), launcher=sandbox.worker_argv)
    yield workers
    workers.shutdown()


def _request(layout: Layout, name: str, sources: dict[str, str], *asked: str) -> WorkRequest:
    root, inputs = layout.execroot(name, {"act.py": ACTION, **sources})
    return WorkRequest(
        argv=(sys.executable, "-m", "act", str(layout.workspace), *asked),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(root),
        stdout_path=str(root / ".tmp/stdout"),
        stderr_path=str(root / ".tmp/stderr"),
        sandbox=[b.to_json() for b in action_binds(root, inputs)],
    )


def _lines(request: WorkRequest) -> dict[str, str]:
    text = Path(request.stdout_path).read_text()
    return dict(line.split(" ", 1) for line in text.splitlines())


def test_each_action_sees_its_own_inputs_and_none_of_an_earlier_ones(
    pool: WorkerPool, layout: Layout
) -> None:
    first = _request(layout, "e1", {"a.txt": "a"}, "a.txt", "secret.txt")
    assert pool.run(first) == WorkResponse(0, worker_id="worker-1"), Path(
        first.stderr_path
    ).read_text()
    second = _request(layout, "e2", {"b.txt": "b"}, "a.txt", "b.txt")
    assert pool.run(second).exit_code == 0
    one, two = _lines(first), _lines(second)
    assert one["pid"] == two["pid"]  # one worker served both
    assert (one["a.txt"], one["secret.txt"]) == ("True", "False")
    assert (two["a.txt"], two["b.txt"]) == ("False", "True")


def test_inputs_are_read_only_and_tmp_is_fresh_for_each_action(
    pool: WorkerPool, layout: Layout
) -> None:
    first = _request(layout, "e1", {})
    second = _request(layout, "e2", {})
    assert pool.run(first).exit_code == 0
    assert pool.run(second).exit_code == 0
    assert _lines(first)["write"] == "Read-only file system"
    # Only mount points (the execroot's path, the shared state): not what the first left.
    assert "left-by" not in _lines(second)["tmp"]
    assert "shared" in _lines(second)["tmp"]
    assert (layout.workspace / "act.py").read_text() == ACTION


@pytest.mark.parametrize(
    ("end", "response"),
    [
        (
            "os.kill(os.getppid(), signal.SIGSEGV); time.sleep(30)",
            WorkResponse(
                -signal.SIGSEGV,
                crashed=True,
                message="worker crashed (signal 11, SIGSEGV) while running act",
            ),
        ),
        (
            "os.kill(os.getpid(), signal.SIGSEGV)",  # the action's own child, not the worker
            WorkResponse(-signal.SIGSEGV, message="killed by signal SIGSEGV"),
        ),
        ("os._exit(7)", WorkResponse(7)),
    ],
    ids=["worker-segfault", "action-segfault", "action-exit"],
)
def test_a_worker_that_dies_is_reported_as_it_died_not_as_its_host_was_killed(
    pool: WorkerPool, layout: Layout, end: str, response: WorkResponse
) -> None:
    """Issue 20: a sandboxed worker's SIGSEGV was reported as SIGKILL (the host killed
    its group, itself included, and the pool killed the host before it could say)."""
    root, inputs = layout.execroot("dies", {"act.py": f"import os, signal, time\n{end}\n"})
    request = WorkRequest(
        argv=(sys.executable, "-m", "act"),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(root),
        stdout_path=str(root / ".tmp/stdout"),
        stderr_path=str(root / ".tmp/stderr"),
        sandbox=[b.to_json() for b in action_binds(root, inputs)],
    )
    got = pool.run(request)
    assert (got.exit_code, got.crashed, got.message) == (
        response.exit_code,
        response.crashed,
        response.message,
    )


# kiln as far as a sandboxed worker goes: a sandbox and a pool running one action.
KILN = """
    import sys
    from kiln.sandbox.client import Sandbox
    from kiln.sandbox.view import SandboxConfig, action_binds, toolchain_dirs
    from kiln.workers import WorkerPool, WorkRequest
    root, pids, base = sys.argv[1], sys.argv[2], sys.argv[3]
    config = SandboxConfig(toolchain_dirs([base]), (), base + "/sandbox")
    sandbox = Sandbox.start(sys.executable, config)
    binds = [b.to_json() for b in action_binds(root, ["act.py"])]
    request = WorkRequest((sys.executable, "-m", "act", pids), {"PATH": "/usr/bin:/bin"}, root,
                          root + "/.tmp/out", root + "/.tmp/err", sandbox=binds)
    WorkerPool(sys.executable, 1, preload=(), launcher=sandbox.worker_argv).run(request)
"""
ORPHANING = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getppid()} {child.pid}")  # the worker, the action's child
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def test_kill_9_of_kiln_kills_the_sandboxed_worker_its_host_and_its_child(
    layout: Layout,
) -> None:
    root, _ = layout.execroot("e1", {"act.py": ORPHANING})
    pids = root / "pids"  # in the execroot: written from inside the sandbox
    kiln = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILN), str(root), str(pids), str(layout.base)]
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not pids.exists():
            assert time.monotonic() < deadline, "the action never started"
            time.sleep(0.02)
        started = [int(pid) for pid in pids.read_text().split()]
        kiln.send_signal(signal.SIGKILL)
        kiln.wait()
        deadline = time.monotonic() + 60  # a bound for a failing test, not a claim of speed
        while any(_running(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(_running(pid) for pid in started)
    finally:
        kiln.kill()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
