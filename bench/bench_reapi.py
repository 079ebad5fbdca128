"""Remote execution on a real BuildGrid (REAPI) against Ray and against local, in one run.

    .venv/bin/python bench/bench_reapi.py [--actions 20] [--runs 3] [--workers 1,2,4]

The workspace: a copy of this repository with a package of --actions
`model_weights` targets (models/mlp.py, seeds of their own): each a small torch
action (ModelWeights: import torch, build the MLP seeded, save safetensors).
Every build gets new seeds, so nothing is a cache hit anywhere (disk cache,
BuildGrid's action cache, kiln's entries), and a fresh --disk_cache. The
builds of one round, interleaved, --runs rounds after one untimed warm-up
round (Python environments, Ray's workers, Bazel's server and analysis):

    local          kiln build here (its persistent torch workers)
    ray            --remote_executor=ray://: a loopback Ray cluster of one CPU node
                   (tests/ray_cluster.py), BuildGrid's CAS as its --remote_cache
    reapi xN       --remote_executor=grpc://BuildGrid with N kiln workers
                   (`kiln worker --reapi`) started for the build, stopped after
    bazel reapi x1 Bazel 4.2.3 (tools/bazel.sh), --remote_executor=grpc:// on the same
                   BuildGrid, one kiln worker, the same targets from the same BUILD file

Figures: the build process's wall time; for kiln, the span of its ModelWeights
actions (first started to last finished, from the build events: process start,
loading and analysis left out), that span per action, its ratio to local's, and
the overhead per action over local ((span - local span) / actions: upload,
Execute, BuildGrid's queue and assignment, the worker's fresh process that
imports torch, download). Bazel's row has its wall time only (no build events).
Medians of --runs. This machine has 2 cores: 4 workers (and BuildGrid, PostgreSQL
and the driver beside them) share them, so more workers cannot run faster here;
the row says what the scheduling costs, not what a farm gains.

Everything started (PostgreSQL, BuildGrid, the workers, the Ray cluster, Bazel's
server) is stopped by the PID it was started with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.bazel_workspace import Bazel, copy_repository  # noqa: E402
from tests.buildgrid_server import BuildGrid  # noqa: E402
from tests.ray_cluster import NodeSpec, RayCluster  # noqa: E402
from tests.reapi_workers import workers_in  # noqa: E402

KILN = [sys.executable, "-m", "kiln", "--nohome_rc"]
PACKAGE = "bench_reapi"


def write_package(root: Path, actions: int, base: int) -> None:
    rules = ['load("@kiln//rules:defs.bzl", "model_weights")', ""]
    for i in range(actions):
        rules.append(
            f'model_weights(name = "w{i}", src = "mlp.py", factory = "mlp:build", '
            f'seed = {base + i}, out = "w{i}.safetensors")'
        )
    names = ", ".join(f'":w{i}"' for i in range(actions))
    rules.append(f'filegroup(name = "all", srcs = [{names}])')
    folder = root / PACKAGE
    folder.mkdir(exist_ok=True)
    shutil.copy(REPO / "models" / "mlp.py", folder / "mlp.py")
    (folder / "BUILD").write_text("\n".join(rules) + "\n")


class Bench:
    def __init__(self, tmp: Path, actions: int) -> None:
        self.tmp = tmp
        self.actions = actions
        self.count = 0
        self.kiln_ws = copy_repository(tmp / "kiln-ws")
        self.bazel_ws = copy_repository(tmp / "bazel-ws")

    def kiln(self, flags: list[str]) -> dict[str, float]:
        self.count += 1
        write_package(self.kiln_ws, self.actions, self.count * 1000)
        events = self.tmp / f"events-{self.count}.json"
        cache = self.tmp / f"disk-{self.count}"
        start = time.monotonic()
        done = subprocess.run(
            [
                *KILN,
                "build",
                f"//{PACKAGE}:all",
                f"--disk_cache={cache}",
                f"--build_event_json_file={events}",
                *flags,
            ],
            cwd=self.kiln_ws,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - start
        if done.returncode != 0:
            raise SystemExit(f"kiln build {' '.join(flags)} failed:\n{done.stderr[-4000:]}")
        seen = [json.loads(line) for line in events.read_text().splitlines()]
        ours = [e for e in seen if e.get("mnemonic") == "ModelWeights"]
        finished = [e for e in ours if e["type"] == "action_finished"]
        started = [e["time_ms"] for e in ours if e["type"] == "action_started"]
        if len(finished) != self.actions or not started:
            raise SystemExit(f"expected {self.actions} ModelWeights actions:\n{done.stderr}")
        span = (max(e["time_ms"] for e in finished) - min(started)) / 1000
        shutil.rmtree(cache, ignore_errors=True)
        events.unlink()
        return {"wall": wall, "span": span}

    def bazel(self, bazel: Bazel, grid: BuildGrid) -> dict[str, float]:
        self.count += 1
        write_package(self.bazel_ws, self.actions, self.count * 1000)
        start = time.monotonic()
        built = bazel.build(
            f"--remote_executor={grid.address}",
            "--spawn_strategy=remote",
            "--genrule_strategy=remote",
            f"//{PACKAGE}:all",
        )
        wall = time.monotonic() - start
        if built.code != 0:
            raise SystemExit(f"bazel build failed:\n{built.err[-4000:]}")
        ran = built.processes("remote")
        if ran < self.actions:
            raise SystemExit(f"bazel ran {ran} remote processes, not {self.actions}:\n{built.err}")
        return {"wall": wall}


@contextlib.contextmanager
def workers(root: Path, grid: BuildGrid, count: int) -> Iterator[None]:
    """`count` kiln workers, serving once each has said so; stopped by PID after."""
    specs: dict[str, list[str]] = {f"n{count}-{i}": [] for i in range(count)}
    with workers_in(root, dict(os.environ), grid, specs):
        deadline = time.monotonic() + 60
        logs = [root.parent / f"worker-{name}.log" for name in specs]
        while not all(log.exists() and "serving" in log.read_text() for log in logs):
            if time.monotonic() > deadline:
                raise SystemExit("the kiln workers did not start")
            time.sleep(0.2)
        time.sleep(1.0)  # the session opened after the line
        yield


@contextlib.contextmanager
def bazel_server(bench: Bench) -> Iterator[Bazel]:
    bazel = Bazel.at(bench.bazel_ws, bench.tmp / "bazel-root", bench.tmp / "bazel-home")
    pid = 0
    try:
        yield bazel
    finally:
        with contextlib.suppress(Exception):
            pid = int(bazel("info", "server_pid", timeout=60).out.strip() or 0)
        bazel.shutdown()
        if pid:  # shutdown asks; the PID makes sure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def row(label: str, runs: list[dict[str, float]], base: dict[str, float], actions: int) -> str:
    wall = statistics.median(r["wall"] for r in runs)
    walls = " ".join(f"{r['wall']:.1f}" for r in runs)
    text = f"{label:<16} {wall:8.1f} s  x{wall / base['wall']:5.2f}"
    if "span" in runs[0]:
        span = statistics.median(r["span"] for r in runs)
        per = span / actions * 1000
        over = (span - base["span"]) / actions * 1000
        text += f"  {span:8.1f} s  {per:7.0f} ms  x{span / base['span']:5.2f}  {over:+8.0f} ms"
    else:
        text += f"  {'-':>10}  {'-':>10}  {'':>6}  {'-':>11}"
    return text + f"   (walls {walls})"


HEADER = (
    "build            wall        /local   actions    per action /local  over local"
    "\n"
    "---------------- ----------  ------  ----------  ---------- ------  -----------"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actions", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--no-bazel", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    options = parser.parse_args()
    counts = [int(n) for n in options.workers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-reapi-"))
    ray_tmp = Path(f"/tmp/kiln-bench-ray-{os.getpid()}")  # short: Ray's socket paths
    bench = Bench(tmp, options.actions)
    results: dict[str, list[dict[str, float]]] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(shutil.rmtree, ray_tmp, True)
        grid = BuildGrid.start(tmp / "grid")
        stack.callback(grid.stop)
        grpc = [
            f"--remote_cache={grid.address}",
            f"--remote_executor={grid.address}",
            "--spawn_strategy=remote",
            "--remote_timeout=120",
        ]
        modes: list[tuple[str, object]] = [("local", lambda: bench.kiln([]))]
        if not options.no_ray:
            cluster = RayCluster.start(ray_tmp, [NodeSpec("cpu0", cpus=1)])
            stack.callback(cluster.stop)
            ray = [
                f"--remote_executor={cluster.address}",
                f"--remote_cache={grid.address}",
                "--spawn_strategy=remote",
                "--jobs=2",
            ]
            modes.append(("ray x1", lambda: bench.kiln(ray)))
        for n in counts:

            def reapi(n: int = n) -> dict[str, float]:
                with workers(bench.kiln_ws, grid, n):
                    return bench.kiln([*grpc, f"--jobs={max(2, n)}"])

            modes.append((f"reapi x{n}", reapi))
        if not options.no_bazel:
            bazel = stack.enter_context(bazel_server(bench))

            def on_bazel() -> dict[str, float]:
                with workers(bench.bazel_ws, grid, 1):
                    return bench.bazel(bazel, grid)

            modes.append(("bazel reapi x1", on_bazel))
        for rnd in range(options.runs + 1):
            for label, run in modes:
                figures = run()  # type: ignore[operator]
                if rnd:  # round 0 warms up
                    results.setdefault(label, []).append(figures)
                shown = " ".join(f"{k} {v:.1f} s" for k, v in figures.items())
                print(f"round {rnd}{' (warm-up)' if not rnd else ''}: {label}: {shown}", flush=True)
    base = {
        "wall": statistics.median(r["wall"] for r in results["local"]),
        "span": statistics.median(r["span"] for r in results["local"]),
    }
    print(
        f"\n{options.actions} ModelWeights actions (torch, models/mlp.py) per build; medians of "
        f"{options.runs} interleaved rounds; {os.cpu_count()} cores here"
    )
    print(HEADER)
    for label, _ in modes:
        print(row(label, results[label], base, options.actions))
    if "bazel reapi x1" in results and "reapi x1" in results:
        kiln = statistics.median(r["wall"] for r in results["reapi x1"])
        bazel = statistics.median(r["wall"] for r in results["bazel reapi x1"])
        print(f"kiln / Bazel 4.2.3 on the same BuildGrid, 1 worker: wall x{kiln / bazel:.2f}")


if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    main()
