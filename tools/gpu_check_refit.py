"""The refit split of trt_engine on a GPU machine, for tools/gpu_check.sh (not a test here).

    python tools/gpu_check_refit.py workspace DIR            # a workspace: mlp + mlp_trt
    python tools/gpu_check_refit.py retrain   DIR SEED       # new weights for its mlp
    python tools/gpu_check_refit.py events    DIR EVENTS.json FIRST|SECOND
    python tools/gpu_check_refit.py check     DIR OUT.json   # the build vs eager
    python tools/gpu_check_refit.py verdict   DIR            # one line: refit or not

`events` checks what a build ran (FIRST: TorchExport, TrtCompile and TrtEngine
executed; SECOND, after `retrain`: TrtCompile cached, TorchExport and TrtEngine
executed). Where this Torch-TensorRT cannot refit (`kiln info toolchains`: refit no)
the rule plans no split: then both builds must run TrtEngine alone, with the weights.
`check` loads the .ep the build wrote with torch_tensorrt.load and
compares it with eager torch at the min/opt/max shapes, with the weights the build
used, and reports what the manifest says of them (manifest.weights: refit or not,
and why). Exits non-zero if a check fails; a JSON report goes to OUT.json.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = "mlp_trt"
TOLERANCE = 1e-3

BUILD = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    weights = "mlp.safetensors",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)

trt_engine(name = "mlp_trt", model = ":mlp", platform = "linux_x86_64")
"""


def workspace(root: Path) -> dict[str, Any]:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "WORKSPACE").write_text("")
    (root / "models/BUILD").write_text(textwrap.dedent(BUILD))
    for name in ("mlp.py", "mlp.safetensors"):
        shutil.copy(REPO / "models" / name, root / "models" / name)
    return {"ok": True, "workspace": str(root)}


def retrain(root: Path, seed: str) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(root / "models"))
    import mlp

    torch.manual_seed(int(seed))
    save_file(mlp.build().state_dict(), str(root / "models/mlp.safetensors"))
    return {"ok": True, "seed": int(seed)}


def events(root: Path, path: str, which: str) -> dict[str, Any]:
    del root
    statuses: dict[str, list[str]] = {}
    for line in Path(path).read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "action_finished":
            statuses.setdefault(str(event["mnemonic"]), []).append(str(event["status"]))
    compile_status = {"FIRST": "executed", "SECOND": "cached"}[which]
    split = "TrtCompile" in statuses
    expected = (
        {"TorchExport": ["executed"], "TrtCompile": [compile_status], "TrtEngine": ["executed"]}
        if split
        else {"TrtEngine": ["executed"]}  # no refit here: the engine is built with the weights
    )
    ok = all(statuses.get(k) == v for k, v in expected.items())
    return {"ok": ok, "split": split, "statuses": statuses, "expected": expected}


def verdict(root: Path) -> dict[str, Any]:
    """One line for the summary: whether the weights change was refit, from the manifest."""
    from kiln.action_specs import TrtManifest

    manifest = TrtManifest.read(root / f"kiln-out/models/{TARGET}.manifest.json")
    weights = manifest.weights
    line = (
        f"REFIT USED: the weights change was refit into the engine ({weights.how})"
        if weights.refit
        else f"REFIT NOT AVAILABLE: the engine was rebuilt with the weights ({weights.how})"
    )
    return {"ok": True, "line": line, "refit": weights.refit}


def check(root: Path, out: str) -> dict[str, Any]:
    import torch
    import torch_tensorrt
    from kiln.action_specs import TrtEngineSpec, TrtManifest
    from kiln.actions.model_loading import build_model, example_inputs

    folder = root / "kiln-out/models"
    spec = TrtEngineSpec.read(folder / f"{TARGET}.trt.json")
    manifest = TrtManifest.read(folder / f"{TARGET}.manifest.json")
    source = spec.model.source.model_copy(update={"src": str(root / spec.model.source.src)})
    if source.weights:
        source = source.model_copy(update={"weights": str(root / source.weights)})
    model = build_model(source).cuda()
    loaded = torch_tensorrt.load(str(folder / manifest.program.file)).module()
    errors = {}
    for point, shapes in spec.model.signature.shape_points():
        inputs = [t.cuda() for t in example_inputs(spec.model.signature.inputs, shapes, seed=1)]
        with torch.no_grad():
            got, want = loaded(*inputs), model(*inputs)
        errors[point] = float((got.float() - want.float()).abs().max())
    report = {
        "max_abs_error": errors,
        "weights": manifest.weights.model_dump(),
        "engine_sha256": [e.sha256 for e in manifest.engines],
        "refit_used": manifest.weights.refit,
    }
    report["ok"] = max(errors.values()) <= TOLERANCE
    Path(out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str]) -> int:
    command, root, *rest = argv
    checks = {
        "workspace": workspace,
        "retrain": retrain,
        "events": events,
        "check": check,
        "verdict": verdict,
    }
    try:
        report = checks[command](Path(root).resolve(), *rest)
    except Exception as error:  # a report, not a traceback only
        import traceback

        traceback.print_exc()
        report = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    print(report["line"] if "line" in report else json.dumps(report, indent=2))
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
