"""Latency of CPU packages compiled for x86-64-v3 (kiln's default) against x86-64-v4 and
`native`, side by side in one run: ResNet-18 and tiny_lm (a transformer), one thread
and all.

    flock /tmp/kiln-heavy.lock .venv/bin/python bench/bench_cpu_target.py [--rounds 15]

kiln builds //models:resnet_pt2 and //models:tiny_lm_pt2 (the default cpu_target) and
the same models with cpu_target = "x86-64-v4" and "native" in a copy of models/,
without validation (the figures are of the packages, not of the build). Then one
process loads the packages with torch._inductor.aoti_load_package and, for each thread
count, runs rounds in which the targets alternate (so load changes on this shared
machine hit all alike): each round times `--calls` calls after a warm-up. Printed: the
median per-call latency of each, and each against v3 (below 1: faster than v3).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
KILN = str(REPO / ".venv" / "bin" / "kiln")

MODELS = ("resnet", "tiny_lm")
TARGETS = {"v4": "x86-64-v4", "native": "native"}  # beside <model>_pt2, the default


def extra_build() -> str:
    return "".join(
        f'\naoti_package(name = "{model}_{suffix}", model = ":{model}", '
        f'cpu_target = "{target}", validate = False)\n'
        for model in MODELS
        for suffix, target in TARGETS.items()
    )


TIMER = textwrap.dedent(
    """
    import json, statistics, sys, time, torch, torch._inductor
    out, rounds, calls, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    torch.manual_seed(0)
    MODELS = {
        "resnet18 (1x3x224x224)": ("resnet", (torch.randn(1, 3, 224, 224),)),
        "tiny_lm (4x64 tokens)": ("tiny_lm", (torch.randint(0, 1000, (4, 64)),)),
    }
    for model, (stem, inputs) in MODELS.items():
        packages = {
            "x86-64-v3": torch._inductor.aoti_load_package(f"{out}/{stem}_pt2.pt2"),
            "x86-64-v4": torch._inductor.aoti_load_package(f"{out}/{stem}_v4.pt2"),
            "native": torch._inductor.aoti_load_package(f"{out}/{stem}_native.pt2"),
        }
        isa = packages["native"].get_metadata()["kiln.cpu_isa"]
        for count in threads:
            torch.set_num_threads(int(count))
            times = {name: [] for name in packages}
            with torch.no_grad():
                for package in packages.values():
                    for _ in range(3):
                        package(*inputs)
                for _ in range(rounds):
                    for name, package in packages.items():
                        start = time.perf_counter()
                        for _ in range(calls):
                            package(*inputs)
                        times[name].append((time.perf_counter() - start) / calls * 1000)
            medians = [statistics.median(times[n]) for n in packages]
            print(json.dumps([model, int(count), *medians, isa]), flush=True)
    """
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-cpu-target-"))
    try:
        root = tmp / "ws"
        shutil.copytree(REPO / "models", root / "models")
        (root / "WORKSPACE").write_text("")
        build = root / "models" / "BUILD"
        build.write_text(build.read_text(encoding="utf-8") + extra_build(), encoding="utf-8")
        env = dict(os.environ, HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"))
        targets = [f"//models:{m}_pt2" for m in MODELS]
        targets += [f"//models:{m}_{s}" for m in MODELS for s in TARGETS]
        subprocess.run([KILN, "build", *targets], cwd=root, env=env, check=True)
        threads = ["1", str(os.cpu_count() or 1)]
        out = str(root / "kiln-out" / "models")
        timed = subprocess.run(
            [PYTHON, "-c", TIMER, out, str(args.rounds), str(args.calls), *threads],
            cwd=root,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        print(
            f"{'model':<24} {'threads':>7} {'x86-64-v3':>11} {'x86-64-v4':>11} {'native':>11}"
            f" {'v4/v3':>6} {'native/v3':>9}"
        )
        for line in timed.stdout.splitlines():
            if line.startswith("["):
                model, count, v3, v4, native, isa = json.loads(line)
                print(
                    f"{model:<24} {count:>7} {v3:9.2f}ms {v4:9.2f}ms {native:9.2f}ms"
                    f" {v4 / v3:6.2f} {native / v3:9.2f}   native = {isa}"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
