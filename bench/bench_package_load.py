"""Load and first call of a kiln package in a fresh Python: torch's own
`torch._inductor.aoti_load_package` against kiln's generated `<name>_loader.py` (issue 29).

    .venv/bin/python bench/bench_package_load.py          # //models:mlp_pt2, 9 runs each
    .venv/bin/python bench/bench_package_load.py --target //models:resnet_pt2 --runs 5
    .venv/bin/python bench/bench_package_load.py --folder kiln-out/models --no-build
    PY bench/bench_package_load.py --python PY --target //models:mlp_cuda --device cuda \
        --folder WS/kiln-out/models --no-build       # on the GPU machine, its venv's PY

For a TensorRT package (its loader loads libtorchtrt_runtime.so) torch's way imports
torch_tensorrt before aoti_load_package, as a user of torch's API must.

kiln builds the target in this repository first (a cache hit once built). Then the two
ways run alternately, --runs times each after one untimed warm-up of each (so the
inductor cache, the page cache and .pyc files are warm for both, as on a machine that
loaded a package before; load changes on a shared machine hit both alike), each in a
fresh `python -c` in the package's folder:

    torch     import torch._inductor; aoti_load_package(<name>.pt2); package(*inputs)
    kiln      <Class>(); model(*inputs)           (from <name>_loader import <Class>)

Timed, wall-clock, after `import torch` and `from <name>_loader import <Class>` (both
children do the same before the clock starts; the loader's inputs are made from its
INPUTS there): `load` (for torch's way, its torch._inductor import included: it is what
loading needs), `first call`, and both together. Printed: the median of each, side by
side, and kiln/torch (below 1: kiln's loader is faster). Both outputs must agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, ".")
from {module} import {cls}

torch.manual_seed(0)
inputs = []
for spec in {cls}.INPUTS:
    shape = [d.min if not d.dynamic else min(d.max, max(d.min, 2)) for d in spec.dims]
    if spec.dtype.is_floating_point:
        inputs.append(torch.randn(shape, dtype=spec.dtype))
    else:
        low = spec.low if spec.low is not None else 0
        high = spec.high if spec.high is not None else low + 2
        inputs.append(torch.randint(low, high, shape, dtype=spec.dtype))
inputs = [t.to("{device}") for t in inputs]
t2 = time.perf_counter()
if sys.argv[1] == "torch":
    import torch._inductor

    if {tensorrt}:
        import torch_tensorrt  # torch's way: the engine class comes with the package import

    package = torch._inductor.aoti_load_package("{package}")
    t3 = time.perf_counter()
    out = package(*inputs)
else:
    model = {cls}()
    t3 = time.perf_counter()
    out = model(*inputs)
if "{device}" == "cuda":
    torch.cuda.synchronize()
t4 = time.perf_counter()
flat = torch.utils._pytree.tree_leaves(out)
print(json.dumps({{"import_torch": t1 - t0, "load": t3 - t2, "first_call": t4 - t3,
                  "checksum": [float(t.double().sum()) for t in flat]}}))
"""

WAYS = ("torch", "kiln")


def build(target: str) -> None:
    run = subprocess.run(
        [PYTHON, "-m", "kiln", "--nohome_rc", "build", target],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        sys.exit(f"kiln build {target} failed:\n{run.stderr}")


def run_once(python: str, folder: Path, script: str, way: str) -> dict[str, float]:
    run = subprocess.run(
        [python, "-c", script, way], cwd=folder, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        sys.exit(f"{way} failed:\n{run.stderr}")
    result: dict[str, float] = json.loads(run.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="//models:mlp_pt2")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--folder", type=Path, help="the package's folder (kiln-out/<pkg>)")
    parser.add_argument("--no-build", action="store_true", help="use the package as it is")
    parser.add_argument("--python", default=PYTHON, help="the interpreter of the children")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    package, name = args.target.lstrip("/").split(":")
    if not args.no_build:
        build(args.target)
    folder = args.folder or REPO / "kiln-out" / package
    cls = "".join(part.capitalize() for part in name.split("_"))
    # A TensorRT package: torch's way imports torch_tensorrt (its engine class); kiln's
    # loader loads libtorchtrt_runtime.so alone.
    tensorrt = "_load_torchtrt_runtime()" in (folder / f"{name}_loader.py").read_text()
    script = CHILD.format(
        module=f"{name}_loader",
        cls=cls,
        package=f"{name}.pt2",
        device=args.device,
        tensorrt=tensorrt,
    )
    checksums = {way: run_once(args.python, folder, script, way)["checksum"] for way in WAYS}
    if checksums["torch"] != checksums["kiln"]:
        sys.exit(f"the outputs differ: {checksums}")
    times: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for _ in range(args.runs):
        for way in WAYS:
            times[way].append(run_once(args.python, folder, script, way))
    rows = [
        ("import torch", "import_torch"),
        ("load", "load"),
        ("first call", "first_call"),
        ("load + first call", None),
    ]
    print(f"{args.target}: medians of {args.runs} fresh processes each, interleaved (s)")
    print(f"{'':<20}{'torch':>10}{'kiln':>10}{'kiln/torch':>12}")
    for label, key in rows:
        medians = []
        for way in WAYS:
            values = [r["load"] + r["first_call"] if key is None else r[key] for r in times[way]]
            medians.append(statistics.median(values))
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        print(f"{label:<20}{medians[0]:>10.3f}{medians[1]:>10.3f}{ratio:>12.2f}")


if __name__ == "__main__":
    main()
