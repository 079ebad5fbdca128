"""Faults of a REAPI build: a worker killed mid-action, the server restarted mid-build.

Each test has a BuildGrid of its own, as it stops or restarts parts of it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.buildgrid_server import BuildGrid, unavailable_reason
from tests.e2e.reapi.test_grpc_execution import remote_build
from tests.kiln_workspace import Workspace
from tests.reapi_workers import reapi_workers

SLOW = """
genrule(
    name = "slow",
    srcs = ["a.txt"],
    outs = ["slow.out"],
    cmd = "sleep 6; tr a-z A-Z < $< > $@",
)
"""


@pytest.fixture
def own_grid(tmp_path: Path) -> Iterator[BuildGrid]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no BuildGrid here: {reason}")
    grid = BuildGrid.start(tmp_path / "grid", keepalive=5)
    try:
        yield grid
    finally:
        grid.stop()


def _when_started(log: Path, then: object, timeout: float = 60) -> threading.Thread:
    """Call `then()` once the worker logging to `log` has started a lease."""

    def wait() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and ": started" in log.read_text():
                then()  # type: ignore[operator]
                return
            time.sleep(0.1)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_action_has_its_action_run_again_by_another(
    ws: Workspace, own_grid: BuildGrid
) -> None:
    ws.write("app/BUILD", SLOW)
    ws.write("app/a.txt", "killed\n")
    with reapi_workers(ws, own_grid, {"a": []}) as workers:
        killer = _when_started(
            ws.root.parent / "worker-a.log", lambda: workers["a"].send_signal(signal.SIGKILL)
        )
        with reapi_workers(ws, own_grid, {"b": []}) as _:
            run = remote_build(ws, own_grid, "--remote_timeout=60", target="//app:slow")
        killer.join(1)
    assert run.code == 0, run.err
    assert ws.out("app/slow.out") == "KILLED\n"
    log_b = (ws.root.parent / "worker-b.log").read_text()
    assert ": finished (exit code 0)" in log_b, log_b


@pytest.mark.timeout(600)  # a hang is a failure: CI once waited for over an hour here
def test_a_server_restarted_mid_build_is_waited_for(ws: Workspace, own_grid: BuildGrid) -> None:
    """The restart drops the Execute stream and (keep-alive 5 s) the worker's session: the
    driver resumes with WaitExecution, each call bounded by --remote_timeout, and the worker
    opens a new session and runs the requeued lease."""
    ws.write("app/BUILD", SLOW)
    ws.write("app/a.txt", "restarted\n")
    with reapi_workers(ws, own_grid, {"a": []}):
        restarter = _when_started(ws.root.parent / "worker-a.log", own_grid.restart)
        run = remote_build(ws, own_grid, "--remote_timeout=60", target="//app:slow")
        restarter.join(60)
    assert run.code == 0, run.err
    assert ws.out("app/slow.out") == "RESTARTED\n"
    assert "1 executed (1 remote-exec)" in run.err, run.err
