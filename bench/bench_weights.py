"""ResNet-18 retrained: a weights-only rebuild beside the full build, in one run; and the
size and load time of each deployment form.

    .venv/bin/python bench/bench_weights.py [--runs 3] [--loads 5]

Each run, in a fresh copy of models/ with an empty disk cache (so the two builds
alternate: full, weights-only, full, weights-only, ...):

  full          kiln build //models:resnet_pt2: model_weights (seed 18), export, the
                AOTInductor compile, the join, validation at min/opt/max, loader files
                (what every weights change cost before weights were their own artifact)
  weights-only  the seed changed to 19 (a retrained model): the same build again; the
                compile must be a cache hit (goal: at most a fifth of the full build)

with each one's time per action (from --build_event_json_file); then the medians of
both and their ratio. After the last run, the same package built as weights =
"separate", and for both forms the .pt2's size and the time to load it (and its
weights file) in a fresh Python, median of --loads runs. The target goal: the compile
never runs on a weights-only change, and the rebuild, validation included, takes at
most a fifth of the full build's wall time.
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
KILN = [str(REPO / ".venv" / "bin" / "python"), "-m", "kiln"]
PYTHON = str(REPO / ".venv" / "bin" / "python")

BUILD = """
model_weights(
    name = "resnet_weights",
    src = "resnet.py",
    factory = "resnet:build",
    seed = {seed},
    out = "resnet18.safetensors",
)

torch_model(
    name = "resnet",
    src = "resnet.py",
    factory = "resnet:build",
    weights = ":resnet18.safetensors",
    inputs = [{{"name": "image", "shape": [2, 3, 224, 224], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 16, "axes": {{"image": 0}}}}],
)

aoti_package(name = "resnet_pt2", model = ":resnet")
aoti_package(name = "resnet_sep_pt2", model = ":resnet", weights = "separate")
"""

STEPS = ("ModelWeights", "TorchExport", "AotiCompile", "AotiJoin", "AotiValidate")

LOAD = """
import sys, time
import torch, torch._inductor
from kiln.actions.package_loading import load_into
start = time.perf_counter()
package = torch._inductor.aoti_load_package(sys.argv[1])
if len(sys.argv) > 2:
    load_into(package, sys.argv[2])
loaded = time.perf_counter() - start
with torch.no_grad():
    package(torch.zeros(1, 3, 224, 224))
print(loaded)
"""


def build(root: Path, env: dict[str, str], target: str) -> tuple[float, dict[str, float], set[str]]:
    """(wall seconds, seconds per mnemonic, mnemonics that executed)."""
    events = root.parent / "events.json"
    start = time.perf_counter()
    subprocess.run(
        [*KILN, "build", target, f"--build_event_json_file={events}"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    seconds: dict[str, float] = {}
    executed = set()
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "action_finished" and event["status"] == "executed":
            mnemonic = str(event["mnemonic"])
            seconds[mnemonic] = seconds.get(mnemonic, 0.0) + float(event["seconds"])
            executed.add(mnemonic)
    return wall, seconds, executed


def row(name: str, wall: float, seconds: dict[str, float], full: float) -> str:
    steps = "".join(
        f"{seconds.get(s, 0.0):>9.1f}s" if s in seconds else f"{'-':>10}" for s in STEPS
    )
    rest = wall - sum(seconds.values())
    return f"{name:<13}{wall:>8.1f}s{wall / full:>7.2f}{steps}{rest:>9.1f}s"


def load_times(root: Path, env: dict[str, str], runs: int) -> list[str]:
    out = root / "kiln-out/models"
    forms = {
        "packaged": [out / "resnet_pt2.pt2"],
        "separate": [out / "resnet_sep_pt2.pt2", out / "resnet_sep_pt2.weights.safetensors"],
    }
    lines = []
    for form, files in forms.items():
        times = []
        for _ in range(runs):
            done = subprocess.run(
                [PYTHON, "-c", LOAD, *map(str, files)],
                cwd=root,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            times.append(float(done.stdout.split()[-1]))
        sizes = " + ".join(f"{f.stat().st_size / 1e6:.1f} MB" for f in files)
        lines.append(f"{form:<10} {sizes:<24} load {statistics.median(times):6.2f}s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--loads", type=int, default=5, help="0: skip the deployment forms")
    args = parser.parse_args(argv)
    head = "".join(f"{s:>10}" for s in STEPS)
    print(f"{'resnet_pt2':<13}{'wall':>9}{'/full':>7}{head}{'kiln':>10}")
    fulls: list[float] = []
    rebuilds: list[float] = []
    compiled = False
    forms: list[str] = []
    for run in range(args.runs):
        tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-weights-"))
        try:
            root = tmp / "ws"
            (root / "models").mkdir(parents=True)
            (root / "WORKSPACE").write_text("")
            shutil.copy(REPO / "models/resnet.py", root / "models/resnet.py")
            env = dict(os.environ, HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"))
            (root / "models/BUILD").write_text(BUILD.format(seed=18))
            full, seconds, _ = build(root, env, "//models:resnet_pt2")
            fulls.append(full)
            print(row("full", full, seconds, full), flush=True)
            (root / "models/BUILD").write_text(BUILD.format(seed=19))
            wall, seconds, executed = build(root, env, "//models:resnet_pt2")
            rebuilds.append(wall)
            compiled = compiled or "AotiCompile" in executed
            print(row("weights-only", wall, seconds, full), flush=True)
            if run == args.runs - 1 and args.loads:
                build(root, env, "//models:resnet_sep_pt2")  # its own compile, not timed
                forms = load_times(root, env, args.loads)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    full, wall = statistics.median(fulls), statistics.median(rebuilds)
    ratio = wall / full
    met = ratio <= 0.2 and not compiled
    print(
        f"medians of {args.runs}: full {full:.1f}s, weights-only {wall:.1f}s, ratio {ratio:.2f}; "
        f"the compile {'RAN' if compiled else 'never ran'} on a weights-only change; "
        f"goal <= 0.20: {'met' if met else 'NOT met'}"
    )
    for line in forms:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
