"""Both spawners behind one interface: one result type, real timings, the same failures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kiln.action_graph import PYTHON_INTERPRETER, Resources
from kiln.exec.local_spawner import LocalSpawner
from kiln.exec.outcome import Source
from kiln.exec.spawn import Spawner, SpawnRequest
from kiln.exec.worker_spawner import WorkerSpawner

ACTION = """
import os, sys, time
mode = sys.argv[1]
print("out", flush=True)
print("err", file=sys.stderr, flush=True)
time.sleep(0.2)
if mode == "fail":
    sys.exit(3)
if mode == "hang":
    time.sleep(60)
if mode == "segv":
    os.kill(os.getpid(), 11)
"""


@pytest.fixture(params=["local", "worker"])
def spawner(request: pytest.FixtureRequest) -> Iterator[tuple[Spawner, Source]]:
    if request.param == "local":
        yield LocalSpawner(sys.executable), Source.RAN_LOCALLY
        return
    worker = WorkerSpawner(sys.executable, max_instances=1, preload=())
    yield worker, Source.RAN_IN_WORKER
    worker.close()


def _request(tmp_path: Path, mode: str, timeout: float | None = None) -> SpawnRequest:
    root = tmp_path / "execroot"
    root.mkdir(exist_ok=True)
    (root / "act.py").write_text(ACTION)
    return SpawnRequest(
        argv=(PYTHON_INTERPRETER, "-m", "act", mode),  # each spawner resolves it
        env={"PATH": "/usr/bin:/bin"},
        execroot=root,
        stdout=tmp_path / "stdout",
        stderr=tmp_path / "stderr",
        timeout=timeout,
        resources=Resources(),
    )


def test_a_command_that_succeeds(spawner: tuple[Spawner, Source], tmp_path: Path) -> None:
    run, source = spawner
    result = run.spawn(_request(tmp_path, "ok"))
    assert (result.exit_code, result.succeeded, result.source) == (0, True, source)
    assert result.seconds >= 0.2  # measured around the command, in a worker too
    assert (tmp_path / "stdout").read_text() == "out\n"
    assert (tmp_path / "stderr").read_text() == "err\n"


def test_a_command_that_fails(spawner: tuple[Spawner, Source], tmp_path: Path) -> None:
    result = spawner[0].spawn(_request(tmp_path, "fail"))
    assert (result.exit_code, result.succeeded) == (3, False)
    assert result.failure_message == "exited with code 3"


def test_a_command_past_its_timeout_is_killed(
    spawner: tuple[Spawner, Source], tmp_path: Path
) -> None:
    result = spawner[0].spawn(_request(tmp_path, "hang", timeout=1.0))
    assert not result.succeeded
    assert result.failure_message == "timed out after 1 s"
    assert 1.0 <= result.seconds < 10


def test_a_command_killed_by_a_signal_crashed(
    spawner: tuple[Spawner, Source], tmp_path: Path
) -> None:
    result = spawner[0].spawn(_request(tmp_path, "segv"))
    assert result.crashed and not result.succeeded
    assert "SIGSEGV" in result.failure_message


def test_workers_are_pooled_per_interpreter(tmp_path: Path) -> None:
    """Each Python environment has its own interpreter (argv[0]), so its own workers:
    an action never runs in a worker that another environment's action ran in."""
    other = tmp_path / "env" / "python"
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    worker = WorkerSpawner(sys.executable, max_instances=1, preload=())
    try:
        request = _request(tmp_path, "ok")
        first = worker.spawn(request)
        elsewhere = worker.spawn(
            SpawnRequest(**{**request.__dict__, "argv": (str(other), *request.argv[1:])})
        )
        again = worker.spawn(request)
    finally:
        worker.close()
    assert (first.lane, elsewhere.lane, again.lane) == ("worker-1", "env2-worker-1", "worker-1")
