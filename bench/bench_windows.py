"""Windows packages against Linux ones: build wall time, and latency under Wine against
native Linux, one thread and two.

    flock /tmp/kiln-heavy.lock .venv/bin/python bench/bench_windows.py [--calls 200]

In a fresh workspace, kiln builds models/'s mlp and
tests/models/small_cnn.py twice each: for linux_x86_64 and for windows_x86_64, one
target at a time, each build cold (its own disk cache: a Windows build's time holds
fetching the 122 MB wheel with pip and unpacking it, as a first build does), validation
on; the wall time of each `kiln build` is printed. Then latency: the Linux package loaded with
aoti_load_package, the Windows one through its generated loader library, built with
MinGW into a timing program run under wine64 (OMP_NUM_THREADS for Wine,
torch.set_num_threads for Linux): the median of `--calls` calls after ten warm-ups.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
WINE = shutil.which("wine64") or "/usr/lib/wine/wine64"

BUILD = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    weights = "mlp.safetensors",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)

torch_model(
    name = "cnn",
    src = "small_cnn.py",
    factory = "small_cnn:build",
    inputs = [{"name": "image", "shape": [2, 3, 16, 16], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 4, "axes": {"image": 0}}],
)
""" + "".join(
    f'\naoti_package(name = "{m}_{p}", model = ":{m}", target_platform = "{platform}")\n'
    for m in ("mlp", "cnn")
    for p, platform in (("linux", "linux_x86_64"), ("win", "windows_x86_64"))
)
SHAPES = {"mlp": (8, 10), "cnn": (2, 3, 16, 16)}

TIMER_C = (REPO / "bench" / "windows_timer.c").read_text()

LINUX_TIMER = """
import statistics, sys, time, torch, torch._inductor
torch.set_num_threads(int(sys.argv[2]))
package = torch._inductor.aoti_load_package(sys.argv[1])
x = (torch.arange(int(torch.tensor(SHAPE).prod())) % 7).float().div(7).view(SHAPE)
times = []
for i in range(10 + int(sys.argv[3])):
    start = time.perf_counter()
    package(x)
    if i >= 10:
        times.append((time.perf_counter() - start) * 1e3)
print(f"{statistics.median(times):.4f}")
"""


def build(root: Path, target: str) -> float:
    cache = root.parent / f"cache-{target}"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    start = time.monotonic()
    subprocess.run(
        [PYTHON, "-m", "kiln", "build", f"//models:{target}"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - start


def wine_latency(root: Path, model: str, threads: int, calls: int, work: Path) -> float:
    loader = root / "kiln-out/models" / f"{model}_win_windows_loader"
    name = f"{model}_win_loader"
    source = work / f"timer_{model}.c"
    source.write_text(TIMER_C.replace("LOADER", name))
    exe = work / f"timer_{model}.exe"
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-O2", f"-I{loader}", str(source), str(loader / f"{name}.c"),
         "-o", str(exe)],
        check=True,
    )  # fmt: skip
    shutil.copy(root / "kiln-out/models" / f"{model}_win.pt2", work / f"{model}_win.pt2")
    env = {**os.environ, "WINEPREFIX": str(work / "prefix"), "WINEDEBUG": "-all",
           "KMP_AFFINITY": "disabled", "OMP_NUM_THREADS": str(threads)}  # fmt: skip
    shape = [str(d) for d in SHAPES[model]]
    done = subprocess.run(
        [WINE, exe.name, f"{model}_win.pt2", str(calls), *shape],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def linux_latency(root: Path, model: str, threads: int, calls: int) -> float:
    package = root / "kiln-out/models" / f"{model}_linux.pt2"
    code = LINUX_TIMER.replace("SHAPE", repr(SHAPES[model]))
    done = subprocess.run(
        [PYTHON, "-c", code, str(package), str(threads), str(calls)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        (root / "models").mkdir(parents=True)
        (root / "WORKSPACE").write_text("")
        (root / "models/BUILD").write_text(BUILD)
        for source in ("models/mlp.py", "models/mlp.safetensors", "tests/models/small_cnn.py"):
            shutil.copy(REPO / source, root / "models")
        results: dict[str, object] = {}
        for model in ("mlp", "cnn"):
            for platform in ("linux", "win"):
                results[f"build {model}_{platform} (s)"] = round(
                    build(root, f"{model}_{platform}"), 1
                )
        work = Path(tmp) / "wine"
        work.mkdir()
        lib = next(Path(tmp).glob("cache-*_win/**/windows-torch/*/torch/lib"))
        for dll in lib.glob("*.dll"):
            (work / dll.name).symlink_to(dll)
        for model in ("mlp", "cnn"):
            for threads in (1, 2):
                results[f"{model} linux {threads} thread(s) (ms)"] = linux_latency(
                    root, model, threads, args.calls
                )
                results[f"{model} wine {threads} thread(s) (ms)"] = wine_latency(
                    root, model, threads, args.calls, work
                )
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
