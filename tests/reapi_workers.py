"""kiln workers (`kiln worker --reapi`) for the REAPI tests: started as processes, stopped by PID.

with reapi_workers(ws, grid, {"a": ["kiln-pool=a"], "b": ["kiln-pool=b"]}) as workers:
    ...                       each with its own KILN_WORKER_ROOT (its own CAS)
    workers["a"].kill()       a worker that died (SIGKILL), mid-action or not
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tests.buildgrid_server import BuildGrid
from tests.kiln_workspace import Workspace


@contextlib.contextmanager
def reapi_workers(
    ws: Workspace, grid: BuildGrid, specs: Mapping[str, Sequence[str]]
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    with workers_in(ws.root, ws.env, grid, specs) as started:
        yield started


@contextlib.contextmanager
def workers_in(
    root: Path, env: Mapping[str, str], grid: BuildGrid, specs: Mapping[str, Sequence[str]]
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Workers started in workspace `root` with `env`; their logs beside it (worker-NAME.log)."""
    started: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, properties in specs.items():
            worker_env = {**env, "KILN_WORKER_ROOT": str(root.parent / f"worker-{name}")}
            log = (root.parent / f"worker-{name}.log").open("w")
            started[name] = subprocess.Popen(
                [
                    *_kiln(),
                    "worker",
                    f"--reapi={grid.address}",
                    *(f"--property={p}" for p in properties),
                ],
                cwd=root,
                env=worker_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        yield started
    finally:
        for process in started.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started.values():
            try:
                process.wait(40)  # a bot in a long poll notices SIGTERM after it
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _kiln() -> list[str]:
    from tests.kiln_workspace import KILN

    return list(KILN)
