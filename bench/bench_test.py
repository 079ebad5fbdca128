"""`kiln test` beside `bazel test`, every result cached, on one copy of the repository.

    flock /tmp/kiln-heavy.lock nice -n 10 .venv/bin/python bench/bench_test.py   # 5 runs
    .venv/bin/python bench/bench_test.py --runs 9 --pattern //models/tests/...

A copy of the repository in a temporary folder (HOME, kiln's disk cache and Bazel's
--output_user_root in it too) is one workspace for both tools, without
models/benchmarks (a model_benchmark is kiln's only): the same packages to build and the
same test, //models/tests:mlp_test, for both. One untimed `test PATTERN` per tool builds
everything and runs the test; then every timed run must find each test cached (kiln:
"Executed 0 out of", Bazel: the same line), or the script stops. Runs are interleaved,
kiln first on even runs and Bazel first on odd ones (the machine is shared); the table
holds the medians, their spread (max - min) and kiln's time over Bazel's:

    kiln                 `kiln test PATTERN`: a fresh process every time (kiln has no server)
    Bazel, warm server   `bazel test PATTERN` with the server the previous run left
    Bazel, cold server   `bazel shutdown` first (not timed), then `bazel test PATTERN`

Bazel runs with the repository's .bazelrc and KILN_PYTHON set to this interpreter.
Where `bazel` is not installed the script says so and stops (tools/bazel.sh installs it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SKIP = {".git", ".venv", "kiln-out", "kiln-testlogs", "__pycache__", ".mypy_cache"}
SKIP |= {".ruff_cache", ".pytest_cache", ".hypothesis", "user.bazelrc", "gpu-check-out"}
SKIP |= {".device", ".whl", ".wheelhouse"}
KILN, WARM, COLD = "kiln", "Bazel, warm server", "Bazel, cold server"


def copy_repository(target: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> list[str]:
        del directory
        return [n for n in names if n in SKIP or n.startswith("bazel-") or n.endswith(".egg-info")]

    shutil.copytree(REPO, target, symlinks=True, ignore=ignore)
    shutil.rmtree(target / "bench" / "out", ignore_errors=True)
    shutil.rmtree(target / "models" / "benchmarks")  # kiln's only: not equivalent
    return target


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return seconds, done.stderr + done.stdout


def all_cached(output: str, argv: list[str]) -> None:
    line = next((ln for ln in output.splitlines() if ln.startswith("Executed ")), "")
    if not line.startswith("Executed 0 out of "):
        raise SystemExit(f"{' '.join(argv)}: not every test was cached: {line!r}\n{output[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pattern", default="//...")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if shutil.which("bazel") is None:
        print("bazel is not installed: tools/bazel.sh install (Debian's bazel-bootstrap)")
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-test-"))
    root = copy_repository(scratch / "kiln")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch / "home"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "KILN_PYTHON": PYTHON,
        "LANG": "C.UTF-8",
    }
    bazel = ["bazel", f"--output_user_root={scratch / 'bazel-root'}", "--nohome_rc"]
    kiln_test = [PYTHON, "-m", "kiln", "--nohome_rc", "test", args.pattern]
    bazel_test = [*bazel, "test", "--color=no", "--curses=no", args.pattern]

    def timed(argv: list[str]) -> float:
        seconds, output = run(argv, root, env)
        all_cached(output, argv)
        return seconds

    def cold() -> float:
        run([*bazel, "shutdown"], root, env)
        return timed(bazel_test)

    measures: dict[str, Callable[[], float]] = {
        KILN: lambda: timed(kiln_test),
        WARM: lambda: timed(bazel_test),
        COLD: cold,
    }
    samples: dict[str, list[float]] = {name: [] for name in measures}
    try:
        print(f"building and testing once in {scratch} ...", file=sys.stderr, flush=True)
        run(kiln_test, root, env)
        run(bazel_test, root, env)
        for i in range(args.runs):
            order = list(measures) if i % 2 == 0 else [WARM, COLD, KILN]
            for name in order:
                if name == WARM:
                    run(bazel_test, root, env)  # the server up, whatever ran before
                samples[name].append(measures[name]())
            print(f"  run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    finally:
        subprocess.run([*bazel, "shutdown"], cwd=root, env=env, capture_output=True, check=False)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    kiln_median = statistics.median(samples[KILN])
    print(f"\n`test {args.pattern}`, every test cached: median of {args.runs} runs (seconds)\n")
    print("| | median | spread (max - min) | kiln / this |")
    print("|---|---|---|---|")
    for name, values in samples.items():
        median = statistics.median(values)
        spread = max(values) - min(values)
        print(f"| {name} | {median:.2f} | {spread:.2f} | {kiln_median / median:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
