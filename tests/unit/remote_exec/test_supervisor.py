"""The supervisor: a remote action's processes never outlive the Ray worker that ran it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kiln.exec.spawn import SpawnResult
from kiln.remote_exec import supervisor


def _run(tmp_path: Path, script: str, timeout: float | None = None) -> SpawnResult:
    return supervisor.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
        timeout=timeout,
    )


def test_exit_codes_signals_and_timeouts(tmp_path: Path) -> None:
    ended = _run(tmp_path, "echo hi; exit 3")
    assert (ended.exit_code, ended.crashed) == (3, False)
    assert (tmp_path / "out").read_text() == "hi\n"
    killed = _run(tmp_path, "kill -9 $$")
    assert killed.crashed and killed.message == "killed by signal SIGKILL"
    start = time.monotonic()
    late = _run(tmp_path, "sleep 30 & echo $! > pid; wait", timeout=1)
    assert late.message == "timed out after 1 s" and time.monotonic() - start < 10
    _assert_gone(int((tmp_path / "pid").read_text()))


def test_a_killed_worker_takes_the_command_and_its_children_along(tmp_path: Path) -> None:
    """The Ray worker is killed -9 (ray.cancel(force=True), a node going): the command's
    whole process group dies with it, grandchildren included."""
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                from pathlib import Path
                from kiln.remote_exec import supervisor
                root = Path({str(tmp_path)!r})
                supervisor.run(["bash", "-c", "sleep 60 & echo $! > pid; wait"], cwd=root,
                               env={{"PATH": "/usr/bin:/bin"}}, stdout=root / "out",
                               stderr=root / "err", timeout=None)
                """
            ),
        ],
        env=dict(os.environ, PYTHONPATH=str(Path(supervisor.__file__).parents[2])),
    )
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    _assert_gone(int(pid_file.read_text()))


def _assert_gone(pid: int) -> None:
    deadline = time.monotonic() + 60  # a bound for a failing test, not a claim of speed
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # ours: the test started it
    raise AssertionError(f"process {pid} outlived its supervisor")
