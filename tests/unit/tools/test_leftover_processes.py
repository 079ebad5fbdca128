"""The suite's last check: a process a test started that outlives the tests fails the run,
named with the test it came from, and is killed; another run's processes are not its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kiln import process_tree

from tests.leftover_processes import leftovers

REPO = Path(__file__).resolve().parents[3]


def _alive(pid: int) -> bool:
    # A killed process stays a zombie until init reaps it: not running, not counted.
    return any(p == pid and state != b"Z" for p, _, state in process_tree.processes())


def _detached_sleep(env: dict[str, str]) -> int:
    """A `sleep 300` whose parent is gone (as a daemon's is): its pid."""
    started = subprocess.run(
        ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(started.stdout)


def _stop(pid: int) -> None:
    subprocess.run(["kill", "-9", str(pid)], check=False)


def test_a_process_with_its_home_in_the_runs_temp_folder_is_found(tmp_path: Path) -> None:
    run = tmp_path / "pytest-7"
    env = {**os.environ, "HOME": str(run / "home0"), "PYTEST_CURRENT_TEST": "t.py::test_x (call)"}
    pid = _detached_sleep(env)
    try:
        found = {p.pid: p for p in leftovers(run)}
        assert pid in found
        assert found[pid].test == "t.py::test_x (call)"
        assert found[pid].command == "sleep 300"
    finally:
        _stop(pid)


def test_another_runs_processes_are_not_counted(tmp_path: Path) -> None:
    pid = _detached_sleep({**os.environ, "HOME": str(tmp_path / "pytest-70" / "home0")})
    try:
        assert pid not in {p.pid for p in leftovers(tmp_path / "pytest-7")}
    finally:
        _stop(pid)


LEAKING_TEST = """
import os, subprocess

def test_starts_a_daemon(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    out = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], env=env,
                         capture_output=True, text=True, check=True).stdout
    (tmp_path.parent / "daemon.pid").write_text(out)
"""


def test_a_run_that_leaves_a_process_fails_names_its_test_and_kills_it(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKING_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    basetemp = tmp_path / "basetemp"  # never pytest's shared root: its clean-up is per run
    plugins = ["-p", "tests.leftover_processes", "-p", "no:cacheprovider", "-p", "no:xdist"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, f"--basetemp={basetemp}", "test_leaks.py"],
        check=False,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "KILN_TEST_LEFTOVER_GRACE_S": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    pid = int((basetemp / "daemon.pid").read_text())
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    report = run.stdout.split("leftover processes", 1)[1].splitlines()[1:3]
    assert report == [
        "1 process(es) outlived the tests (killed now):",
        f"  {pid} from test_leaks.py::test_starts_a_daemon (call): sleep 300",
    ], run.stdout
    assert not _alive(pid)
