"""A worker that dies, hangs or is interrupted fails only its own action."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kiln.workers import WorkerPool, WorkRequest, WorkResponse
from worker_helpers import MakeExecroot

PID_OR_DIE = """
    import os, signal, sys, time
    mode = sys.argv[1] if len(sys.argv) > 1 else "pid"
    if mode == "exit":
        os._exit(7)
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "sleep":
        open(sys.argv[2], "w").close()  # tells the test the action is running
        time.sleep(60)
    print(os.getppid())  # the worker: each action is a child of its own
"""


def running(pid: int) -> bool:
    """True while pid is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def worker_pid(pool: WorkerPool, request: WorkRequest) -> int:
    assert pool.run(request) == WorkResponse(0)
    return int(Path(request.stdout_path).read_text())


def test_os_exit_is_its_action_s_exit_status_and_the_worker_runs_on(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot(PID_OR_DIE)
    first = worker_pid(pool, root.request())
    response = pool.run(root.request("exit"))
    assert response == WorkResponse(7)
    assert response.worker_id == "worker-1"
    assert worker_pid(pool, root.request()) == first


def test_segfault_fails_only_its_action_with_its_signal_and_the_worker_runs_on(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot(PID_OR_DIE)
    first = worker_pid(pool, root.request())
    response = pool.run(root.request("segv"))
    assert response == WorkResponse(-signal.SIGSEGV, message="killed by signal SIGSEGV")
    assert worker_pid(pool, root.request()) == first


def test_timeout_kills_the_worker_and_every_process_its_action_started(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import subprocess, time
        child = subprocess.Popen(["sleep", "60"])
        with open("child.pid", "w") as f:
            f.write(str(child.pid))
        time.sleep(60)
    """)
    start = time.monotonic()
    response = pool.run(root.request(timeout=0.5))
    assert time.monotonic() - start < 10
    assert response == WorkResponse(-signal.SIGKILL, crashed=True, message="timed out after 0.5 s")
    child = int((root.path / "child.pid").read_text())
    assert eventually(lambda: not running(child))
    ok = make_execroot("print('after the timeout')")
    assert pool.run(ok.request(timeout=30)) == WorkResponse(0)
    assert ok.out() == "after the timeout\n"


def test_kill_all_crashes_the_running_actions_and_the_pool_carries_on(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    root = make_execroot(PID_OR_DIE)
    markers = [tmp_path / f"started{i}" for i in range(2)]
    responses: list[WorkResponse] = []
    with WorkerPool(sys.executable, max_instances=2, preload=()) as pool:
        threads = [
            threading.Thread(
                target=lambda i=i: responses.append(
                    pool.run(root.request("sleep", str(markers[i]), tag=str(i)))
                )
            )
            for i in range(2)
        ]
        for thread in threads:
            thread.start()
        assert eventually(lambda: all(m.exists() for m in markers), timeout=30)
        pool.kill_all()
        for thread in threads:
            thread.join(timeout=10)
        assert [(r.crashed, r.message) for r in responses] == 2 * [
            (True, "worker killed (interrupted) while running kiln_test_action")
        ]
        assert {r.worker_id for r in responses} == {"worker-1", "worker-2"}
        assert worker_pid(pool, root.request()) > 0


def run_concurrently(pool: WorkerPool, requests: list[WorkRequest]) -> list[WorkResponse]:
    responses: list[WorkResponse] = []
    threads = [threading.Thread(target=lambda r=r: responses.append(pool.run(r))) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return responses


def test_concurrent_runs_never_use_more_than_max_instances_workers(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    log = tmp_path / "intervals"
    root = make_execroot(f"""
        import os, time
        start = time.monotonic()
        time.sleep(0.2)
        with open({str(log)!r}, "a") as f:
            f.write(f"{{os.getppid()}} {{start}} {{time.monotonic()}}\\n")
    """)
    with WorkerPool(sys.executable, max_instances=2, preload=()) as pool:
        responses = run_concurrently(pool, [root.request(tag=str(i)) for i in range(6)])
    assert [r.exit_code for r in responses] == [0] * 6
    assert {r.worker_id for r in responses} <= {"worker-1", "worker-2"}
    intervals = [line.split() for line in log.read_text().splitlines()]
    assert len(intervals) == 6
    assert len({pid for pid, _, _ in intervals}) <= 2
    for _, start, _ in intervals:
        at_once = sum(float(s) <= float(start) < float(e) for _, s, e in intervals)
        assert at_once <= 2


def test_shutdown_is_idempotent_and_leaves_no_processes(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    started.mkdir()
    # Each action waits until both run, so that both workers get started (a pause of its
    # own was not enough on a loaded machine: one worker could run both in turn).
    root = make_execroot(f"""
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "60"])
        print(os.getppid(), child.pid)  # the action runs in a fork of its worker
        open(os.path.join({str(started)!r}, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir({str(started)!r})) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    """)
    pool = WorkerPool(sys.executable, max_instances=2, preload=())
    responses = run_concurrently(pool, [root.request(tag=str(i)) for i in range(2)])
    assert [r.exit_code for r in responses] == [0, 0]
    pids = [[int(pid) for pid in root.stdout_of(str(i)).read_text().split()] for i in range(2)]
    workers, children = {w for w, _ in pids}, {c for _, c in pids}
    assert len(workers) == 2
    assert all(running(pid) for pid in workers)
    assert not any(running(pid) for pid in children)  # gone with their actions
    pool.shutdown()
    pool.shutdown()
    assert eventually(lambda: not any(running(pid) for pid in workers))
    after = pool.run(root.request())
    assert after == WorkResponse(1, crashed=True, message="worker pool is shut down")


def test_worker_that_cannot_start_reports_why(make_execroot: MakeExecroot, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "kiln").mkdir(parents=True)
    (broken / "kiln" / "__init__.py").write_text("raise SystemExit('kiln is broken here')\n")
    env = {**os.environ, "PYTHONPATH": str(broken)}
    root = make_execroot("print('never')")
    with WorkerPool(sys.executable, max_instances=1, preload=(), base_env=env) as pool:
        response = pool.run(root.request())
    assert response == WorkResponse(
        1, crashed=True, message="worker failed to start (exit code 1):\nkiln is broken here"
    )


def test_missing_interpreter_fails_the_action(make_execroot: MakeExecroot) -> None:
    root = make_execroot("print('never')")
    with WorkerPool("/kiln/no/python", max_instances=1, preload=()) as pool:
        response = pool.run(root.request())
    assert (response.exit_code, response.crashed) == (127, True)
    assert response.message.startswith("cannot start a worker: [Errno 2] No such file")


def test_preload_failure_is_reported_and_not_fatal(
    make_execroot: MakeExecroot, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_execroot("print('ran')")
    with WorkerPool(sys.executable, max_instances=1, preload=("kiln_no_such_module",)) as pool:
        assert pool.run(root.request()) == WorkResponse(0)
        assert pool.run(root.request()) == WorkResponse(0)
    assert root.out() == "ran\n"
    error = "ModuleNotFoundError: No module named 'kiln_no_such_module'"
    assert pool.preload_errors == {"kiln_no_such_module": error}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"persistent worker could not preload kiln_no_such_module: {error}"
    ]


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_worker_death_is_seen_while_a_forked_child_still_holds_its_pipes(
    pool: WorkerPool, make_execroot: MakeExecroot, monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    root = make_execroot("""
        import os, signal, time
        if os.fork() == 0:
            time.sleep(30)  # the worker's descriptors, response pipe included, stay open
            os._exit(0)
        os.kill(os.getppid(), signal.SIGKILL)  # the worker dies under its action
        time.sleep(30)
    """)
    start = time.monotonic()
    response = pool.run(root.request())
    assert time.monotonic() - start < 10
    assert (response.exit_code, response.crashed) == (-signal.SIGKILL, True)


def test_a_request_holding_gpus_never_waits_behind_the_limit(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    """The scheduler bounds the requests holding GPUs (one per GPU): waiting for a worker
    behind CPU actions would only leave their GPUs idle."""
    release = tmp_path / "release"
    cpu = make_execroot(f"""
        import os, time
        deadline = time.monotonic() + 120
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
    """)
    gpu = make_execroot("print('on the GPU')")
    with WorkerPool(sys.executable, max_instances=1, preload=()) as pool:
        waiting = threading.Thread(target=pool.run, args=(cpu.request(),))
        waiting.start()
        try:
            # The one worker runs the CPU action until `release` exists: this returns first.
            response = pool.run(gpu.request(), holds_gpus=True)
            cpu_still_running = waiting.is_alive()
        finally:
            release.touch()
            waiting.join(timeout=60)
        assert response.exit_code == 0 and gpu.out() == "on the GPU\n"
        assert response.worker_id == "worker-2"  # beyond the limit of one
        # Both stay, idle: later requests of either kind reuse them.
        again = {pool.run(gpu.request(tag="again")).worker_id for _ in range(3)}
        assert again <= {"worker-1", "worker-2"}
    assert cpu_still_running
