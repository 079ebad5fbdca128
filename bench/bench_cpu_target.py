"""Latency of CPU packages compiled for x86-64-v3 (kiln's default) against `native`,
side by side in one run: ResNet-18 and tiny_lm (a transformer), one thread and all.

    flock /tmp/kiln-heavy.lock .venv/bin/python bench/bench_cpu_target.py [--rounds 7]

kiln builds //models:resnet_pt2 and //models:tiny_lm_pt2 (default cpu_target) and the
same models with cpu_target = "native" in a copy of models/, without validation (the
figures are of the packages, not of the build). Then one process loads the four
packages with torch._inductor.aoti_load_package and, for each thread count, runs
rounds in which v3 and native alternate (so load changes on this shared machine hit
both alike): each round times `--calls` calls after a warm-up. Printed: the median
per-call latency of each, and native / v3 (below 1: native is faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
KILN = str(REPO / ".venv" / "bin" / "kiln")

NATIVE = """

aoti_package(name = "resnet_native", model = ":resnet", cpu_target = "native", validate = False)

aoti_package(name = "tiny_lm_native", model = ":tiny_lm", cpu_target = "native", validate = False)
"""
TARGETS = [
    "//models:resnet_pt2",
    "//models:tiny_lm_pt2",
    "//models:resnet_native",
    "//models:tiny_lm_native",
]

TIMER = textwrap.dedent(
    """
    import json, statistics, sys, time, torch, torch._inductor
    out, rounds, calls, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    torch.manual_seed(0)
    MODELS = {
        "resnet18 (1x3x224x224)": ("resnet", (torch.randn(1, 3, 224, 224),)),
        "tiny_lm (1x64 tokens)": ("tiny_lm", (torch.randint(0, 1000, (1, 64)),)),
    }
    for model, (stem, inputs) in MODELS.items():
        packages = {
            "x86-64-v3": torch._inductor.aoti_load_package(f"{out}/{stem}_pt2.pt2"),
            "native": torch._inductor.aoti_load_package(f"{out}/{stem}_native.pt2"),
        }
        isa = packages["native"].get_metadata()["kiln.cpu_isa"]
        for count in threads:
            torch.set_num_threads(int(count))
            times = {name: [] for name in packages}
            with torch.no_grad():
                for name, package in packages.items():
                    for _ in range(3):
                        package(*inputs)
                for _ in range(rounds):
                    for name, package in packages.items():
                        start = time.perf_counter()
                        for _ in range(calls):
                            package(*inputs)
                        times[name].append((time.perf_counter() - start) / calls * 1000)
            v3, native = (statistics.median(times[n]) for n in packages)
            print(json.dumps([model, int(count), v3, native, isa]), flush=True)
    """
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    import json

    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-cpu-target-"))
    try:
        root = tmp / "ws"
        shutil.copytree(REPO / "models", root / "models")
        (root / "WORKSPACE").write_text("")
        build = root / "models" / "BUILD"
        build.write_text(build.read_text(encoding="utf-8") + NATIVE, encoding="utf-8")
        env = dict(os.environ, HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"))
        subprocess.run([KILN, "build", *TARGETS], cwd=root, env=env, check=True)
        threads = ["1", str(os.cpu_count() or 1)]
        timed = subprocess.run(
            [
                PYTHON,
                "-c",
                TIMER,
                str(root / "kiln-out" / "models"),
                str(args.rounds),
                str(args.calls),
                *threads,
            ],
            cwd=root,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        print(f"{'model':<24} {'threads':>7} {'x86-64-v3':>11} {'native':>11} {'native/v3':>10}")
        for line in timed.stdout.splitlines():
            if not line.startswith("["):
                continue
            model, count, v3, native, isa = json.loads(line)
            print(
                f"{model:<24} {count:>7} {v3:9.2f}ms {native:9.2f}ms {native / v3:10.2f}"
                f"   native = {isa}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
