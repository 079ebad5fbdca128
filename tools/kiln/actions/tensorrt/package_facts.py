"""What a Torch-TensorRT .pt2 says about itself: its kiln.* metadata and its manifest.

The metadata keys are those docs/models.md lists for every package (kiln.target,
kiln.model, kiln.device, kiln.cpu_target, kiln.cpu_isa, kiln.toolchain,
kiln.compile_key, kiln.join_key, kiln.program_sha256, kiln.weights_form,
kiln.weights_file, kiln.weights_sha256) plus the TensorRT facts: kiln.weights_how,
kiln.engines (name -> sha256 of each serialized engine), kiln.tensorrt (version and
flavour), kiln.build_gpu. The manifest (<name>.manifest.json, PackageManifest) holds the
same and the engines' sizes, as a declared output: a cache hit shows it too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kiln import cpu_isa
from kiln.action_specs import BuildGpu, Provenance, TrtToolchain
from kiln.actions.tensorrt.engine import (
    _abi_version,
    _flavour,
    _tensorrt_version,
    engine_bytes,
    read_inline_engine,
)
from kiln.package_specs import PackageEngine, PackageManifest, PackageWeights, WeightsHow


def toolchain(torch: Any, torch_tensorrt: Any) -> TrtToolchain:
    return TrtToolchain(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        torch_tensorrt=getattr(torch_tensorrt, "__version__", None),
        flavour=_flavour(torch_tensorrt),
        tensorrt=_tensorrt_version(),
        torch_tensorrt_abi=_abi_version(torch),
    )


def installed_toolchain(torch: Any, tensorrt: Any) -> TrtToolchain:
    """toolchain() without importing torch_tensorrt (2.4 s): its version from the installed
    distribution, its flavour from the TensorRT module it runs on (`tensorrt`), its ABI
    from the runtime library (kiln.actions.torchtrt_runtime)."""
    from kiln.actions import torchtrt_runtime

    rtx = getattr(tensorrt, "__name__", "") == "tensorrt_rtx"
    torchtrt_runtime.load()
    return TrtToolchain(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        torch_tensorrt=_distribution_version("torch_tensorrt_rtx" if rtx else "torch_tensorrt"),
        flavour="rtx" if rtx else "standard",
        tensorrt=str(getattr(tensorrt, "__version__", "")) or None,
        torch_tensorrt_abi=_abi_version(torch),
    )


def _distribution_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_gpu(torch: Any) -> BuildGpu | None:
    """The GPU this action runs on (None without one: the stand-in's CPU tests)."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return BuildGpu(name=props.name, compute_capability=f"{props.major}.{props.minor}")


def inline_engines(module: Any) -> list[tuple[str, Any]]:
    """(constant name, engine object) of every engine a module calls inline
    (torch.ops.tensorrt.execute_engine on a get_attr), in call order: the names the
    retraced program, and so the package's custom_objs_config.json, give them."""
    from kiln.actions.tensorrt.engine import _attribute, _executes_engine

    found: dict[str, Any] = {}
    for node in module.graph.nodes:
        if _executes_engine(node) and getattr(node.args[1], "op", None) == "get_attr":
            name = str(node.args[1].target)
            found.setdefault(name, _attribute(module, name))
    return list(found.items())


def all_engines(module: Any) -> list[tuple[str, Any]]:
    """inline_engines(module), or for a module fresh from compile (`_run_on_acc_N`
    submodules) those, named as the retraced program names their engine constants."""
    from kiln.actions.tensorrt.engine import find_engines

    return inline_engines(module) or [(f"{n}_engine", m) for n, m in find_engines(module)]


def engine_entries(
    engines: list[tuple[str, Any]], records: dict[str, str] | None = None
) -> tuple[PackageEngine, ...]:
    entries = []
    for name, engine in engines:
        if hasattr(engine, "serialized_engine"):  # a _run_on_acc_N submodule
            data = engine_bytes(name, engine)
        else:
            data = read_inline_engine(engine).serialized_engine
        entries.append(engine_entry(name, (records or {}).get(name), data))
    return tuple(entries)


def engine_entry(name: str, record: str | None, data: bytes) -> PackageEngine:
    """The manifest's entry for one serialized engine."""
    return PackageEngine(
        name=name, record=record, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


def metadata(
    origin: Provenance,
    *,
    compile_digest: str,
    program_digest: str,
    weights_digest: str | None,
    weights_file: str | None,
    how: WeightsHow,
    engines: tuple[PackageEngine, ...],
    trt: TrtToolchain,
    gpu: BuildGpu | None,
) -> dict[str, str]:
    """The package's kiln.* metadata (strings, as AOTInductor's are)."""
    tools = {**origin.toolchain, "torch": trt.torch or "", "torch_tensorrt": trt.torch_tensorrt}
    join = {
        "compile_key": compile_digest,
        "program": program_digest,
        "weights": weights_digest,
        "form": "packaged",
        "target": origin.target,
        "how": how,
    }
    return {
        "kiln.target": origin.target,
        "kiln.model": origin.model,
        "kiln.device": origin.device,
        "kiln.cpu_target": origin.cpu_target,
        "kiln.cpu_isa": origin.cpu_isa or "",
        "kiln.cpu_isa_flags": " ".join(cpu_isa.isa_of(origin.cpu_isa).flags)
        if origin.cpu_isa
        else "",
        "kiln.toolchain": " ".join(f"{k}={v}" for k, v in sorted(tools.items()) if v),
        # For this backend: sha256 of what the engines were built from (TrtCompile's
        # refittable program, or the exported program with its weights).
        "kiln.compile_key": compile_digest,
        "kiln.join_key": _digest(join),
        "kiln.program_sha256": program_digest,
        "kiln.weights_form": "packaged",
        "kiln.weights_file": weights_file or "",
        "kiln.weights_sha256": weights_digest or "",
        "kiln.weights_how": how,
        "kiln.engines": json.dumps({e.name: e.sha256 for e in engines}, separators=(",", ":")),
        "kiln.tensorrt": f"{'TensorRT-RTX' if trt.flavour == 'rtx' else 'TensorRT'} "
        f"{trt.tensorrt or '?'}",
        "kiln.build_gpu": f"{gpu.name} (compute capability {gpu.compute_capability})"
        if gpu
        else "",
    }


def write_manifest(
    path: Path,
    origin: Provenance,
    package: Path,
    *,
    weights: PackageWeights,
    engines: tuple[PackageEngine, ...],
    trt: TrtToolchain,
    gpu: BuildGpu | None,
    kiln_metadata: dict[str, str],
) -> PackageManifest:
    manifest = PackageManifest(
        label=origin.target,
        model=origin.model,
        package=package.name,
        backend="tensorrt",
        device=origin.device,
        weights=weights,
        engines=engines,
        tensorrt=trt,
        build_gpu=gpu,
        metadata=kiln_metadata,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(manifest.to_json(), encoding="utf-8")
    return manifest


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
