"""What a torch action pays for a fresh process state, three ways, in one run.

    .venv/bin/python bench/bench_worker_isolation.py [--actions 20]

The action (`python -m bench_torch_action`) imports torch, builds a small model
(a Linear and a conv), runs it once and saves its weights: kiln's cheap torch
actions (ModelWeights, AotiJoin, the checks of AotiValidate) look like this.

    fresh      `python -m` per action: a new interpreter imports torch every time
    fork       a persistent worker as kiln runs it now (kiln.workers.forking): each
               action in a child forked from the worker's pristine state, what it
               left running killed after it
    in-place   the worker as it was before issue 20: the action in the worker's own
               interpreter, its state put back by hand (kiln.workers.isolation), which
               cannot reach a library's globals (a patch of torch stays)

Each runs the same `--actions` requests one after the other; the figure is the
median wall time per action, the first (the worker's start) left out of fork and
in-place and reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from kiln.workers import WorkerPool, WorkRequest, WorkResponse  # noqa: E402

ACTION = textwrap.dedent(
    """
    import sys, torch
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 30 * 30, 10))
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    torch.save(model.state_dict(), "weights.pt")
    """
)

# The worker before issue 20: one interpreter runs every action (inprocess.run_request).
IN_PLACE = textwrap.dedent(
    """
    import json, sys, time
    import torch, torch._inductor, kiln.action_specs
    from kiln.workers.inprocess import run_request
    from kiln.workers.isolation import Baseline
    from kiln.workers.protocol import WorkRequest
    baseline = Baseline.capture()
    request = WorkRequest.from_json(json.loads(sys.argv[1]))
    for _ in range(int(sys.argv[2])):
        start = time.monotonic()
        assert run_request(request, baseline) == 0
        print(time.monotonic() - start, flush=True)
    """
)
PRELOAD = ("torch", "torch._inductor", "kiln.action_specs")


def _request(root: Path) -> WorkRequest:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO / "tools"),
        "OMP_NUM_THREADS": "1",
    }
    return WorkRequest(
        (sys.executable, "-m", "bench_torch_action"),
        env,
        str(root),
        str(root / "stdout"),
        str(root / "stderr"),
    )


def fresh(request: WorkRequest, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "bench_torch_action"],
            cwd=request.cwd,
            env=request.env,
            check=True,
            capture_output=True,
        )
        seconds.append(time.monotonic() - start)
    return seconds


def forked(request: WorkRequest, count: int) -> list[float]:
    seconds = []
    with WorkerPool(sys.executable, 1, preload=PRELOAD, base_env=request.env) as pool:
        for _ in range(count + 1):
            start = time.monotonic()
            assert pool.run(request) == WorkResponse(0), Path(request.stderr_path).read_text()
            seconds.append(time.monotonic() - start)
    return seconds


def in_place(request: WorkRequest, count: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", IN_PLACE, json.dumps(request.to_json()), str(count + 1)],
        env={**request.env},
        check=True,
        capture_output=True,
        text=True,
    )
    return [float(line) for line in done.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actions", type=int, default=20)
    count = parser.parse_args().actions
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bench_torch_action.py").write_text(ACTION)
        request = _request(root)
        results = {
            "fresh": fresh(request, count),
            "fork": forked(request, count)[1:],
            "in-place": in_place(request, count)[1:],
        }
    print(f"{'per torch action':<12} {'median':>8} {'min':>8} {'max':>8}   ({count} actions)")
    for name, seconds in results.items():
        print(
            f"{name:<12} {statistics.median(seconds) * 1000:>6.0f}ms"
            f" {min(seconds) * 1000:>6.0f}ms {max(seconds) * 1000:>6.0f}ms"
        )


if __name__ == "__main__":
    main()
