"""Checks of a trt_engine build on a GPU machine, for tools/gpu_check.sh (not a test here).

    python tools/gpu_check_trt.py engine   TARGET OUT_DIR   # raw engine via the TensorRT
                                                            # Python runtime vs eager
    python tools/gpu_check_trt.py ep       TARGET OUT_DIR   # the saved .ep vs eager
    python tools/gpu_check_trt.py inputs   TARGET OUT_DIR   # x.bin + eager outputs for the
                                                            # C++ runner, at min/opt/max
    python tools/gpu_check_trt.py compare  TARGET OUT_DIR   # the C++ runner's outputs vs eager

TARGET is a label such as //models:mlp_trt; it reads kiln-out/<pkg>/<name>.trt.json
(the spec kiln wrote) and .manifest.json, and rebuilds the eager model the way the
action did (kiln.actions.model_loading). Writes a JSON report to OUT_DIR and exits
non-zero if a check fails. The raw-engine check makes the same runtime calls as the
generated C++ class (deserializeCudaEngine, named I/O tensors, set_input_shape,
execute_async_v3 on a CUDA stream), so it stands in for the C++ run where no TensorRT
headers exist to compile it.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from kiln.action_specs import Point, TrtEngineSpec

TOLERANCE = 1e-3


def _paths(target: str) -> tuple[Path, str]:
    package, _, name = target.removeprefix("//").partition(":")
    return Path("kiln-out") / package, name


def _load(target: str) -> tuple[TrtEngineSpec, dict[str, Any], Path, str]:
    """The spec kiln wrote (the record TrtEngine read) and the manifest, as a deployer
    reads it (plain JSON)."""
    folder, name = _paths(target)
    spec = TrtEngineSpec.read(folder / f"{name}.trt.json")
    manifest = json.loads((folder / f"{name}.manifest.json").read_text())
    return spec, manifest, folder, name


def _eager(spec: TrtEngineSpec) -> Any:
    import torch
    from kiln.actions.model_loading import build_model

    return build_model(spec.model.source).to(torch.device("cuda"))


def _inputs(spec: TrtEngineSpec, which: Point, seed: int = 1) -> list[Any]:
    from kiln.actions.model_loading import example_inputs

    shapes = {r.name: r.at(which) for r in spec.ranges}
    return [t.cuda() for t in example_inputs(spec.model.signature.inputs, shapes, seed=seed)]


def _outputs(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_engine(target: str, out: Path) -> dict[str, Any]:
    import torch
    import torch_tensorrt

    # After torch_tensorrt: its proxy module, standing for tensorrt or tensorrt_rtx.
    trt = importlib.import_module("tensorrt")

    spec, manifest, folder, _ = _load(target)
    (engine_record,) = manifest["engines"]
    started = time.monotonic()
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine((folder / engine_record["file"]).read_bytes())
    assert engine is not None, "deserialize_cuda_engine returned None"
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    modes = {n: str(engine.get_tensor_mode(n)) for n in names}
    expected = [b["name"] for b in engine_record["inputs"] + engine_record["outputs"]]
    report: dict[str, Any] = {
        "engine_tensors": modes,
        "manifest_tensors": expected,
        "names_match": sorted(names) == sorted(expected),
        "tensorrt": getattr(trt, "__version__", "?"),
        "torch_tensorrt": torch_tensorrt.__version__,
    }
    context = engine.create_execution_context()
    report["deserialize_and_context_s"] = round(time.monotonic() - started, 2)
    model = _eager(spec)
    stream = torch.cuda.Stream()
    errors = {}
    for which in ("min", "opt", "max"):
        inputs = _inputs(spec, which)
        for binding, tensor in zip(engine_record["inputs"], inputs, strict=True):
            context.set_input_shape(binding["name"], tuple(tensor.shape))
            context.set_tensor_address(binding["name"], tensor.data_ptr())  # contiguous
        results = []
        for binding in engine_record["outputs"]:
            shape = tuple(context.get_tensor_shape(binding["name"]))
            dtype = getattr(torch, binding["dtype"] or "float32")
            result = torch.empty(shape, dtype=dtype, device="cuda")
            context.set_tensor_address(binding["name"], result.data_ptr())
            results.append(result)
        with torch.cuda.stream(stream):
            ok = context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()
        assert ok, "execute_async_v3 failed"
        with torch.no_grad():
            reference = _outputs(model(*inputs))
        errors[which] = max(
            float((r.float() - e.float()).abs().max())
            for r, e in zip(results, reference, strict=True)
        )
    report["max_abs_error"] = errors
    report["ok"] = report["names_match"] and max(errors.values()) <= TOLERANCE
    return report


def check_ep(target: str, out: Path) -> dict[str, Any]:
    import torch
    import torch_tensorrt

    spec, manifest, folder, _ = _load(target)
    started = time.monotonic()
    loaded = torch_tensorrt.load(str(folder / manifest["program"]["file"])).module()
    report: dict[str, Any] = {"load_s": round(time.monotonic() - started, 2)}
    model = _eager(spec)
    errors = {}
    for which in ("min", "opt", "max"):
        inputs = _inputs(spec, which)
        with torch.no_grad():
            got = _outputs(loaded(*inputs))
            reference = _outputs(model(*inputs))
        errors[which] = max(
            float((g.float() - e.float()).abs().max()) for g, e in zip(got, reference, strict=True)
        )
    report["max_abs_error"] = errors
    report["ok"] = max(errors.values()) <= TOLERANCE
    return report


def write_inputs(target: str, out: Path) -> dict[str, Any]:
    """Raw input files and eager outputs for the C++ runner, one set per min/opt/max."""
    import torch

    spec, manifest, _, _ = _load(target)
    model = _eager(spec)
    cases = {}
    for which in ("min", "opt", "max"):
        inputs = _inputs(spec, which)
        with torch.no_grad():
            reference = _outputs(model(*inputs))
        files = []
        for binding, tensor in zip(manifest["engines"][0]["inputs"], inputs, strict=True):
            path = out / f"{which}_{binding['name']}.bin"
            path.write_bytes(tensor.contiguous().cpu().numpy().tobytes())
            files.append([str(path), "x".join(str(d) for d in tensor.shape)])
        for binding, tensor in zip(manifest["engines"][0]["outputs"], reference, strict=True):
            (out / f"{which}_eager_{binding['name']}.bin").write_bytes(
                tensor.contiguous().cpu().numpy().tobytes()
            )
        cases[which] = files
        (out / f"runner_args_{which}.txt").write_text(
            "".join(f"{path}\n{dims}\n" for path, dims in files)
        )
    # The max case with the first dynamic dimension one past its max: the runner must refuse it.
    bad = [list(pair) for pair in cases["max"]]
    for i, item in enumerate(spec.ranges):
        pairs = enumerate(zip(item.min, item.max, strict=True))
        axis = next((a for a, (lo, hi) in pairs if lo != hi), None)
        if axis is not None:
            dims = list(item.max)
            dims[axis] += 1
            bad[i][1] = "x".join(str(d) for d in dims)
            break
    (out / "runner_args_bad.txt").write_text("".join(f"{p}\n{d}\n" for p, d in bad))
    return {"cases": cases, "ok": True}


def compare(target: str, out: Path) -> dict[str, Any]:
    """The runner wrote <which>_out_<name>.bin; compare with <which>_eager_<name>.bin."""
    import numpy as np

    _, manifest, _, _ = _load(target)
    errors = {}
    for which in ("min", "opt", "max"):
        worst = 0.0
        for binding in manifest["engines"][0]["outputs"]:
            dtype = np.dtype(binding["dtype"] or "float32")
            got = np.fromfile(out / f"{which}_out_{binding['name']}.bin", dtype=dtype)
            want = np.fromfile(out / f"{which}_eager_{binding['name']}.bin", dtype=dtype)
            assert got.shape == want.shape, f"{which}: {got.shape} != {want.shape}"
            worst = max(worst, float(np.abs(got.astype("f8") - want.astype("f8")).max()))
        errors[which] = worst
    return {"max_abs_error": errors, "ok": max(errors.values()) <= TOLERANCE}


CHECKS = {"engine": check_engine, "ep": check_ep, "inputs": write_inputs, "compare": compare}


def main(argv: list[str]) -> int:
    check, target, out_dir = argv
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        report = CHECKS[check](target, out)
    except Exception as error:  # a report, not a traceback only
        import traceback

        traceback.print_exc()
        report = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    (out / f"check_{check}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
