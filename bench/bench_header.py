"""AotiCompile with torch's precompiled headers cold and warm: this checkout against another
kiln (main), interleaved, in one run.

    .venv/bin/python bench/bench_header.py --python /work/main/.venv/bin/python [--runs 2]

Each kiln gets a disk cache of its own. Per run, alternately for each kiln:

  cold   the disk cache's torch folder removed (no precompiled header), then
         `kiln build //m:pt2` of a model no build has seen (so AotiCompile runs)
  warm   another unseen model, same disk cache: the headers the cold build made are
         there (in this checkout: published read-only by kiln's header maker)

The figures: AotiCompile's time as kiln prints it (in this checkout that includes the
header maker kiln runs after an action that made a header itself) and the whole
build's wall time, medians over the runs, and this/other.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = """
import torch


def model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(32, {width}), torch.nn.ReLU(), torch.nn.Linear({width}, 10)
    )
"""
BUILD = """
torch_model(name = "m", src = "m.py", factory = "m:model",
            inputs = [{"name": "x", "shape": [4, 32], "dtype": "float32"}])
aoti_package(name = "pt2", model = ":m")
"""
ACTION = re.compile(r"AotiCompile //m:pt2 \([^,]*, ([0-9.]+)s\)")


def build(python: str, tmp: Path, cache: Path, width: int) -> tuple[float, float]:
    """(AotiCompile's seconds, the build's wall seconds) of a fresh model of `width`."""
    root = tmp / f"ws-{width}"
    (root / "m").mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    (root / "m" / "BUILD").write_text(BUILD)
    (root / "m" / "m.py").write_text(MODEL.format(width=width))
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), HOME=str(tmp))
    start = time.perf_counter()
    run = subprocess.run(
        [python, "-m", "kiln", "build", "//m:pt2"],
        check=False,
        cwd=root,
        env=env,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    text = run.stderr.decode(errors="replace")
    found = ACTION.search(text)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"build with {python} failed:\n{text[-3000:]}")
    return float(found.group(1)), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--python", required=True, help="the other kiln's interpreter (main)")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    kilns = {"other": args.python, "this": str(REPO / ".venv" / "bin" / "python")}
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-header-"))
    samples: dict[tuple[str, str, str], list[float]] = {}
    width = 16
    try:
        for _ in range(args.runs):
            for phase in ("cold", "warm"):
                for name, python in kilns.items():
                    cache = tmp / f"cache-{name}"
                    if phase == "cold":
                        shutil.rmtree(cache / "kiln" / "tmp" / "torch", ignore_errors=True)
                    width += 1
                    action, wall = build(python, tmp, cache, width)
                    samples.setdefault((phase, name, "action"), []).append(action)
                    samples.setdefault((phase, name, "wall"), []).append(wall)
                    print(f"  {phase} {name:<5} AotiCompile {action:6.2f}s  build {wall:6.2f}s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # The ratio of medians, and the median of each run's ratio (this and other ran back to
    # back, so a burst of load on the machine reaches both of a pair).
    header = f"{'median of ' + str(args.runs):<22} {'other':>8} {'this':>8}"
    print(f"\n{header} {'this/other':>11} {'paired':>7}")
    for phase in ("cold", "warm"):
        for what, label in (("action", "AotiCompile"), ("wall", "build")):
            others, these = samples[(phase, "other", what)], samples[(phase, "this", what)]
            other, this = statistics.median(others), statistics.median(these)
            paired = statistics.median(t / o for t, o in zip(these, others, strict=True))
            print(
                f"{phase + ' ' + label:<22} {other:7.2f}s {this:7.2f}s {this / other:10.2f}x"
                f" {paired:6.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
