"""The executor's speed goals, measured on 1,000 genrules, beside their baselines.

    .venv/bin/python bench/bench_executor.py [--runs 7]

Workspace: 200 packages of 5 genrules each (one cheap `cat` action apiece),
each reading its own source and the same-named genrule of the previous
package. Every kiln run is a fresh process of `.venv/bin/kiln` from the
workspace root, with HOME and XDG_CACHE_HOME in a temporary directory.

    full build     kiln build //... --jobs=2, empty cache (context, not a goal); the
                   sandbox's cost: the same with --nosandbox, alternated, and the
                   difference per action
    worker actions 300 trivial Python actions through one persistent worker, in a
                   sandbox (its view remade per action) and not: the cost per action
    no-op          kiln build //... again: goal <= 0.4 s; beside `python -c pass`
                   and `kiln query //...` (loading alone)
    one change     edit the source of a genrule nothing depends on: only its action
                   runs; goal: time beyond that action <= 0.3 s (the action's own
                   time comes from --build_event_json_file)
    1 GiB hit      a genrule writing 1 GiB, built once; then kiln-out/ removed and
                   the target built again: goal <= 50 ms for the cache hit
                   (lookup + hardlink into kiln-out/); beside `cp` of the same file
    1 GiB digest   kiln.cache.digest.digest_file of a new 1 GiB file: goal >= 1 GB/s;
                   beside `sha256sum`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KILN = str(REPO / ".venv" / "bin" / "kiln")
PACKAGES = 200
RULES = 5
GIB = 1 << 30


def generate(root: Path) -> None:
    (root / "WORKSPACE").write_text("")
    for p in range(PACKAGES):
        package = root / f"p{p:03d}"
        package.mkdir()
        rules = []
        for r in range(RULES):
            (package / f"src{r}.txt").write_text(f"package {p} rule {r}\n")
            dep = f'"//p{p - 1:03d}:g{r}", ' if p else ""
            rules.append(
                f'genrule(name = "g{r}", srcs = [{dep}"src{r}.txt"], outs = ["g{r}.out"], '
                'visibility = ["//visibility:public"], cmd = "cat $(SRCS) > $@")'
            )
        (package / "BUILD").write_text("\n".join(rules) + "\n")
    big = root / "big"
    big.mkdir()
    (big / "BUILD").write_text(
        'genrule(name = "gib", outs = ["gib.bin"], cmd = "head -c 1073741824 /dev/zero > $@")\n'
    )


def run(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def action_seconds(events: Path, status: str) -> list[float]:
    """Durations of the actions that finished with `status` (executed, cached)."""
    found = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "action_finished" and event.get("status") == status:
            found.append(float(event["seconds"]))
    return found


def row(name: str, values: list[float], goal: str, baseline: str = "") -> None:
    median = statistics.median(values)
    shown = f"{median * 1000:8.1f} ms" if median < 10 else f"{median:8.2f} s "
    print(f"{name:<34} {shown}  (min {min(values) * 1000:.1f} ms)  {goal:<18} {baseline}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-exec-"))
    try:
        root = tmp / "ws"
        root.mkdir()
        generate(root)
        env = dict(os.environ, HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"))
        print(f"{PACKAGES * RULES} genrules; median of {args.runs} runs, fresh processes\n")
        full_builds(root, env, tmp, max(1, args.runs // 2))
        run([KILN, "build", *GENRULES], root, env)  # fills the default cache the rest use
        noop_and_change(root, env, tmp / "events.json", args.runs)
        gib_hit(root, env, tmp, max(3, args.runs // 2))
        digest_speed(tmp, env)
        worker_actions(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


GENRULES = ["--", "//...", "-//big/..."]  # Bazel's way to subtract a pattern


def full_builds(root: Path, env: dict[str, str], tmp: Path, runs: int) -> None:
    """Full builds from an empty cache, sandboxed and --nosandbox by turns."""
    times: dict[str, list[float]] = {"--sandbox": [], "--nosandbox": []}
    for i in range(runs):
        for flag, measured in times.items():
            shutil.rmtree(root / "kiln-out", ignore_errors=True)
            cache = tmp / f"cache-{flag}-{i}"
            measured.append(
                run(
                    [KILN, "build", "--jobs=2", flag, f"--disk_cache={cache}", *GENRULES], root, env
                )
            )
    sandboxed, plain = (statistics.median(v) for v in times.values())
    row("full build (--jobs=2, empty cache)", times["--sandbox"], "", "sandboxed")
    row("full build --nosandbox", times["--nosandbox"], "", "baseline")
    extra = (sandboxed - plain) / (PACKAGES * RULES) * 1000
    print(f"{'sandbox: per action, wall':<34} {extra:8.2f} ms  ({extra * 2:.2f} ms of a core)\n")


def worker_actions(tmp: Path, count: int = 300) -> None:
    """Trivial Python actions through one persistent worker: the sandbox's rebinding."""
    sys.path.insert(0, str(REPO / "tools"))
    from kiln.sandbox.client import Sandbox
    from kiln.sandbox.view import SandboxConfig, action_binds, toolchain_dirs
    from kiln.workers import WorkerPool, WorkRequest

    execroot = tmp / "worker-execroot"
    (execroot / ".tmp").mkdir(parents=True)
    (tmp / "act.py").write_text("print('ok')\n")
    (execroot / "act.py").symlink_to(tmp / "act.py")
    binds = [b.to_json() for b in action_binds(execroot, ["act.py"])]
    config = SandboxConfig(toolchain_dirs([tmp]), (), str(tmp / "sandbox"))
    sandbox = Sandbox.start(sys.executable, config)
    medians = {}
    try:
        for name, launcher in (("sandboxed", sandbox.worker_argv), ("plain", None)):
            pool = WorkerPool(sys.executable, 1, preload=(), launcher=launcher)
            seconds = []
            for _ in range(count):
                request = WorkRequest(
                    (sys.executable, "-m", "act"),
                    {"PATH": "/usr/bin:/bin"},
                    str(execroot),
                    str(execroot / ".tmp/out"),
                    str(execroot / ".tmp/err"),
                    sandbox=binds if launcher else None,
                )
                start = time.perf_counter()
                assert pool.run(request).exit_code == 0
                seconds.append(time.perf_counter() - start)
            pool.shutdown()
            medians[name] = seconds[10:]  # the worker's start aside
    finally:
        sandbox.close()
    row("worker action, sandboxed", medians["sandboxed"], "")
    row("worker action, no sandbox", medians["plain"], "", "baseline")


def noop_and_change(root: Path, env: dict[str, str], events: Path, runs: int) -> None:
    python = [run([sys.executable, "-c", "pass"], root, env) for _ in range(runs)]
    row("baseline: python -c pass", python, "")
    query = [run([KILN, "query", "//..."], root, env) for _ in range(runs)]
    row("baseline: kiln query //...", query, "")
    noop = [run([KILN, "build", *GENRULES], root, env) for _ in range(runs)]
    row("no-op kiln build //...", noop, "goal <= 400 ms")
    beyond = []
    leaf = root / f"p{PACKAGES - 1:03d}" / "src0.txt"
    for i in range(runs):
        leaf.write_text(f"edit {i}\n")
        total = run([KILN, "build", f"--build_event_json_file={events}", *GENRULES], root, env)
        ran = action_seconds(events, "executed")
        assert len(ran) == 1, f"expected one action to run, got {len(ran)}"
        beyond.append(total - ran[0])
    row("one change: time beyond the action", beyond, "goal <= 300 ms")


def gib_hit(root: Path, env: dict[str, str], tmp: Path, runs: int) -> None:
    events = tmp / "events.json"
    run([KILN, "build", "//big:gib"], root, env)
    hits, copies = [], []
    blob = root / "kiln-out/big/gib.bin"
    for _ in range(runs):
        copy_start = time.perf_counter()
        shutil.copyfile(blob, tmp / "copy.bin")
        copies.append(time.perf_counter() - copy_start)
        (tmp / "copy.bin").unlink()
        shutil.rmtree(root / "kiln-out/big")
        run([KILN, "build", "//big:gib", f"--build_event_json_file={events}"], root, env)
        hits.append(action_seconds(events, "cached")[0])
    baseline = f"baseline cp: {statistics.median(copies) * 1000:.0f} ms"
    row("1 GiB output: cache hit", hits, "goal <= 50 ms", baseline)


def digest_speed(tmp: Path, env: dict[str, str]) -> None:
    sys.path.insert(0, str(REPO / "tools"))
    from kiln.cache.digest import digest_file

    fresh = tmp / "fresh.bin"
    with fresh.open("wb") as f:
        for _ in range(GIB // (1 << 24)):
            f.write(os.urandom(1 << 24))
    rates, sums = [], []
    for _ in range(3):
        start = time.perf_counter()
        digest_file(fresh)
        rates.append(GIB / (time.perf_counter() - start) / 1e9)
        sums.append(GIB / run(["sha256sum", str(fresh)], tmp, env) / 1e9)
    print(
        f"{'1 GiB digest (sha256)':<34} {statistics.median(rates):8.2f} GB/s "
        f"goal >= 1 GB/s      baseline sha256sum: {statistics.median(sums):.2f} GB/s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
