"""Remote execution on Ray: 20 model-like GPU actions here vs on 1, 2 and 4 GPU nodes.

    .venv/bin/python bench/bench_remote_exec.py [--actions 20] [--seconds 1.0] [--runs 3]

The workspace: --actions genrules, each declaring `gpus = 1` and sleeping
--seconds (a model step's shape without its CPU: the 2-core machine cannot
run four real exports at once, four sleeps it can), each reading a 2 MB
input of its own and writing a small output. The builds, every one a fresh
`kiln build` process with an empty disk cache and a fresh remote-cache
instance (nothing is a cache hit):

    local      this machine as one GPU (--gpus=1): the actions run one after another
    N nodes    a driver with --gpus=0 and --remote_executor: a real Ray cluster on
               127.0.0.1 (tests/ray_cluster.py) of a CPU-less head and N nodes with one
               (fake) GPU each; nginx as the remote cache

For each: the wall time of the `kiln build` process; the span of its
actions (first action started to last finished, from the build events: the
process's start, loading, analysis and, for Ray, connecting, which happens
as analysis asks the cluster's GPU node for its GPU facts, are left out);
the ideal span (the sleeps the GPUs must run: ceil(actions / GPUs) x
seconds); and the scheduling overhead per action, (span - ideal) / actions x
GPUs: what each action cost beyond its own sleep on its GPU (upload,
submit, Ray's placement, the supervisor, download; for local, kiln's own
executor and process start). Medians of --runs; one untimed warm-up build
per cluster first starts its Ray workers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.nginx_cache import NginxCache  # noqa: E402
from tests.ray_cluster import NodeSpec, RayCluster  # noqa: E402

KILN = [sys.executable, "-m", "kiln"]


def workspace(root: Path, actions: int, seconds: float) -> None:
    root.mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    rules = []
    for i in range(actions):
        (root / f"in{i}.bin").write_bytes(os.urandom(2_000_000))
        rules.append(
            f'genrule(name = "m{i}", srcs = ["in{i}.bin"], outs = ["m{i}.out"], gpus = 1, '
            f'cmd = "sleep {seconds}; sha256sum $< > $@")'
        )
    names = ", ".join(f'":m{i}"' for i in range(actions))
    rules.append(f'filegroup(name = "all", srcs = [{names}])')
    (root / "BUILD").write_text("\n".join(rules) + "\n")


def build(tmp: Path, name: str, flags: list[str], actions: int, seconds: float) -> dict[str, float]:
    root = tmp / name / "ws"
    workspace(root, actions, seconds)
    events = tmp / name / "events.json"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / name / "xdg"), HOME=str(tmp / name))
    start = time.monotonic()
    done = subprocess.run(
        [*KILN, "build", "//:all", f"--build_event_json_file={events}", *flags],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{name}: kiln build failed:\n{done.stderr}")
    finished = [json.loads(line) for line in events.read_text().splitlines()]
    ran = [e for e in finished if e["type"] == "action_finished" and e["mnemonic"] == "Genrule"]
    assert len(ran) == actions, done.stderr
    started = [e["time_ms"] for e in finished if e["type"] == "action_started"]
    span = (max(e["time_ms"] for e in ran) - min(started)) / 1000
    shutil.rmtree(tmp / name, ignore_errors=True)
    return {"wall": wall, "span": span}


HEADER = "           build wall   actions span   ideal span   overhead/action   (spans)"


def row(label: str, runs: list[dict[str, float]], gpus: int, actions: int, seconds: float) -> str:
    wall = statistics.median(r["wall"] for r in runs)
    span = statistics.median(r["span"] for r in runs)
    ideal = math.ceil(actions / gpus) * seconds
    overhead_ms = (span - ideal) / actions * gpus * 1000
    spans = " ".join(f"{r['span']:.2f}" for r in runs)
    return (
        f"{label:<10} {wall:9.2f} s {span:12.2f} s {ideal:10.2f} s {overhead_ms:14.0f} ms"
        f"   ({spans})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", default="1,2,4")
    options = parser.parse_args()
    actions, seconds, runs = options.actions, options.seconds, options.runs
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-rx-"))
    ray_tmp = Path(f"/tmp/kiln-bench-ray-{os.getpid()}")  # short: Ray's socket paths
    cache = NginxCache.start(tmp / "nginx")
    lines = [f"{actions} GPU actions of {seconds:g} s each; medians of {runs} runs", HEADER]
    count = 0
    try:
        walls = []
        for _ in range(runs):
            count += 1
            walls.append(build(tmp, f"b{count}", ["--gpus=1"], actions, seconds))
        lines.append(row("local", walls, 1, actions, seconds))
        print(HEADER, lines[-1], sep="\n", flush=True)
        for nodes in (int(n) for n in options.nodes.split(",")):
            specs = [NodeSpec(f"gpu{i}", cpus=1, gpus=1) for i in range(nodes)]
            started = time.monotonic()
            cluster = RayCluster.start(ray_tmp / str(nodes), specs)
            up = time.monotonic() - started
            try:
                flags = [
                    "--gpus=0",
                    f"--jobs={max(2, nodes * 2)}",
                    f"--remote_executor={cluster.address}",
                    f"--remote_cache={cache.url}",
                ]

                def timed(flags: list[str] = flags) -> dict[str, float]:
                    nonlocal count
                    count += 1
                    instance = [f"--remote_instance_name=b{count}"]
                    return build(tmp, f"b{count}", flags + instance, actions, seconds)

                timed()  # warm-up: each node starts its Ray workers
                walls = [timed() for _ in range(runs)]
            finally:
                cluster.stop()
            label = f"{nodes} node" + ("s" if nodes > 1 else "")
            lines.append(row(label, walls, nodes, actions, seconds) + f" [cluster up {up:.1f} s]")
            print(lines[-1], flush=True)
    finally:
        cache.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    print("\n".join(["", *lines]))


if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    main()
