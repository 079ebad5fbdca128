"""kiln building mlp_pt2 and resnet_pt2 end to end, beside a plain Python script
making the same torch calls, in one run.

    .venv/bin/python bench/bench_models.py [--models mlp resnet] [--runs 1]

For each model, alternately:

  script   one fresh `python` process that makes the weights (resnet: seeded init,
           saved as safetensors, as kiln's model_weights step), builds the model, runs
           torch.export.export and torch.export.save, loads the program back,
           runs torch._inductor.aoti_compile_and_package into a fresh, empty
           inductor cache, then in a second fresh process loads the package and
           compares it with eager at the min, opt and max batch — the work of
           kiln's TorchExport, AotiCompile + AotiJoin and AotiValidate actions.
  kiln     `kiln build //models:<name>_pt2` in a copy of models/ with an empty
           disk cache, in a fresh process (which starts a persistent worker).
  no-op    the same kiln build again: never imports torch.

The goal: kiln's overhead over the script at most 5 %.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
KILN = str(REPO / ".venv" / "bin" / "kiln")

MODELS = {
    # name: (module, example shape, dynamic batch range, weights: a file, or a seed to make them)
    "mlp": ("mlp", [8, 10], (1, 64), "models/mlp.safetensors"),
    "resnet": ("resnet", [2, 3, 224, 224], (1, 16), "18"),
}

SCRIPT = textwrap.dedent(
    """
    import os, sys, torch, torch._inductor
    sys.path.insert(0, "models")
    from safetensors.torch import load_file, save_file
    module, out = sys.argv[1], sys.argv[2]
    shape, lo, hi, weights = eval(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    if weights.isdigit():  # kiln's model_weights step: seeded init, saved
        torch.manual_seed(int(weights))
        state = {k: v.contiguous() for k, v in __import__(module).build().state_dict().items()}
        save_file(state, out + ".safetensors")
        weights = out + ".safetensors"
    torch.manual_seed(0)
    model = __import__(module).build().eval()
    model.load_state_dict(load_file(weights))
    x = torch.randn(*shape)
    batch = torch.export.Dim("batch", min=lo, max=hi)
    with torch.no_grad():
        ep = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    torch.export.save(ep, out + ".ep.pt2")
    ep = torch.export.load(out + ".ep.pt2")
    torch._inductor.aoti_compile_and_package(ep, package_path=out + ".pt2")
    """
)

VALIDATE = textwrap.dedent(
    """
    import sys, torch, torch._inductor
    sys.path.insert(0, "models")
    from safetensors.torch import load_file
    module, out = sys.argv[1], sys.argv[2]
    shape, lo, hi, weights = eval(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    model = __import__(module).build().eval()
    model.load_state_dict(load_file(out + ".safetensors" if weights.isdigit() else weights))
    package = torch._inductor.aoti_load_package(out + ".pt2")
    for b in (lo, shape[0], hi):
        x = torch.randn(b, *shape[1:])
        with torch.no_grad():
            assert torch.allclose(package(x), model(x), rtol=1e-4, atol=1e-4)
    """
)


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def workspace(tmp: Path, name: str) -> Path:
    root = tmp / f"ws-{name}"
    shutil.copytree(REPO / "models", root / "models")
    (root / "WORKSPACE").write_text("")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{'model':<8} {'script':>9} {'kiln':>9} {'overhead':>9} {'kiln no-op':>11}")
    # torch's precompiled headers stay warm across runs for kiln as for the script (whose
    # inductor keeps them in $TMPDIR/torchinductor_<user>, which no run empties): every
    # run's disk cache names one folder for them; the first run makes them.
    headers = Path(tempfile.mkdtemp(prefix="kiln-bench-headers-"))
    try:
        run_models(args.models, args.runs, headers)
    finally:
        shutil.rmtree(headers, ignore_errors=True)
    return 0


def run_models(models: list[str], runs: int, headers: Path) -> None:
    for name in models:
        module, shape, (lo, hi), weights = MODELS[name]
        for run in range(runs):
            tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-models-"))
            try:
                root = workspace(tmp, name)
                (tmp / "cache" / "kiln" / "tmp").mkdir(parents=True)
                (tmp / "cache" / "kiln" / "tmp" / "torch").symlink_to(headers)
                env = dict(
                    os.environ,
                    HOME=str(tmp),
                    XDG_CACHE_HOME=str(tmp / "cache"),
                    TORCHINDUCTOR_CACHE_DIR=str(tmp / f"inductor-{run}"),
                )
                argv_common = [module, str(tmp / name), repr(shape), str(lo), str(hi), weights]
                script = timed([PYTHON, "-c", SCRIPT, *argv_common], root, env)
                script += timed([PYTHON, "-c", VALIDATE, *argv_common], root, env)
                kiln_env = {k: v for k, v in env.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
                kiln = timed([KILN, "build", f"//models:{name}_pt2"], root, kiln_env)
                noop = timed([KILN, "build", f"//models:{name}_pt2"], root, kiln_env)
                overhead = (kiln - script) / script * 100
                print(f"{name:<8} {script:8.1f}s {kiln:8.1f}s {overhead:8.1f}% {noop:10.2f}s")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
