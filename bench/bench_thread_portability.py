"""Does an AOTInductor CPU package depend on the build machine's core count?

    flock /tmp/kiln-heavy.lock .venv/bin/python bench/bench_thread_portability.py [--runs N]

Compiles a reduction-heavy model (softmax, layer norm, sums over rows and columns)
with kiln's CPU settings (kiln.actions.aoti_compile.inductor_configs) four times, each
in a fresh process: torch.set_num_threads(1) and (4), first without and then with
kiln.actions.aoti_compile.THREAD_CONFIGS (what kiln pins). Prints whether the generated
kernel sources and model libraries are equal, then the latency of the pinned and the
unpinned package at 1 and at this machine's thread count (median of --runs).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODEL = """
import torch
from torch import nn


class Reductions(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 256)
        self.norm = nn.LayerNorm(256)

    def forward(self, x):
        y = torch.softmax(self.proj(x), dim=-1)
        y = self.norm(y + x)
        return y.sum(dim=1, keepdim=True) + y.amax(dim=0, keepdim=True) * y.mean()
"""

COMPILE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
threads, pinned, out = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
torch.set_num_threads(threads)
from reductions import Reductions
from kiln.actions import aoti_compile
from kiln.action_specs import CompileSpec
from kiln.actions.isa_compile import pinned_vec_isa, compile_env
import difflib
import os
import shutil
os.environ.update(compile_env("x86-64-v3"))
torch.manual_seed(0)
model = Reductions().eval()
x = torch.randn(512, 256)
program = torch.export.export(model, (x,))
spec = CompileSpec(structure=sys.argv[0], output=out, layout="", device="cpu",
                   cpu_target="x86-64-v3", cpu_isa="x86-64-v3", inductor_configs={})
configs = aoti_compile.inductor_configs(spec, "bench")
if not pinned:
    for key in getattr(aoti_compile, "THREAD_CONFIGS", {}):
        configs.pop(key, None)
with pinned_vec_isa("x86-64-v3"):
    torch._inductor.aoti_compile_and_package(program, package_path=out, inductor_configs=configs)
"""

RUN = """
import sys, time, statistics, torch
torch.set_num_threads(int(sys.argv[2]))
loaded = torch._inductor.aoti_load_package(sys.argv[1])
x = torch.randn(512, 256)
for _ in range(5):
    loaded(x)
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    loaded(x)
    times.append(time.perf_counter() - start)
print(statistics.median(times) * 1e3)
"""


def compile_once(work: Path, threads: int, pinned: bool) -> Path:
    out = work / f"t{threads}_{'pinned' if pinned else 'free'}.pt2"
    # One cache folder, emptied: the kernels name their headers' path in it (as kiln's
    # private caches are one path per compiled spec).
    cache = work / "inductor-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    subprocess.run(
        [sys.executable, "-c", COMPILE, str(work), str(threads), str(int(pinned)), str(out)],
        check=True,
        env=env,
        capture_output=True,
    )
    return out


def code_of(package: Path) -> dict[str, bytes]:
    """The package's kernel sources and model library, by suffix (names hold hashes)."""
    with zipfile.ZipFile(package) as archive:
        return {
            name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1]: archive.read(name)
            for name in archive.namelist()
            if name.endswith((".kernel.cpp", ".wrapper.so"))
        }


def latency(package: Path, threads: int, runs: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(package), str(threads), str(runs)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "reductions.py").write_text(MODEL)
        results: dict[str, object] = {"cpu_count": os.cpu_count()}
        packages = {}
        for pinned in (False, True):
            one, four = compile_once(work, 1, pinned), compile_once(work, 4, pinned)
            packages[pinned] = one
            a, b = code_of(one), code_of(four)
            kernels = [k for k in a if k.endswith(".cpp")]
            diff = [
                line
                for k in kernels
                for line in difflib.unified_diff(
                    a[k].decode().splitlines(), b.get(k, b"").decode().splitlines(), n=0
                )
                if line[:1] in "+-" and line[:3] not in ("+++", "---")
            ]
            results["pinned" if pinned else "unpinned"] = {
                "equal": a == b,
                "differing": sorted(k for k in a if a.get(k) != b.get(k)),
                "kernel lines differing (1 thread vs 4)": diff[:8],
            }
        cores = os.cpu_count() or 1
        for pinned, package in packages.items():
            name = "pinned" if pinned else "unpinned"
            results[f"{name}_ms"] = {
                t: round(statistics.median(latency(package, t, args.runs) for _ in range(3)), 3)
                for t in sorted({1, cores})
            }
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"{time.monotonic() - start:.0f} s", file=sys.stderr)
