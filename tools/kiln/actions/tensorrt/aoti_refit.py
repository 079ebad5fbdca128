"""AotiRefit: a Torch-TensorRT .pt2 with new weights, without recompiling its wrapper.

    refit_module_weights(TrtCompile's refittable program, the program with the weights)
        -> the refit module (kiln.actions.tensorrt.refit: no engine build)
    AotiPackage's <name>.program.pt2 (the refittable program packaged, once per
    structure) with each engine object replaced by the refit one's
    (kiln.actions.tensorrt.package_archive) and the kiln.* metadata -> <name>.pt2
    + <name>.manifest.json

A change of weights alone re-runs TorchExport and this: the refit and a rewrite of the
package's custom-object records, never the AOTInductor compile.

Where the swap would be wrong it packages the refit module again instead (the full
AOTInductor save, as before issue 29), and the manifest says why:
- the program around the engines reads weights of its own (a PyTorch op kept out of
  TensorRT with parameters): the wrapper was compiled with the structure's
  placeholders for them;
- the package's engine constants are not the refit module's, by name or count.
Where the toolchain cannot refit, the engines are built with the weights
(kiln.actions.tensorrt.refit) and packaged: `weights.how` is "built".
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from kiln.action_specs import TrtToolchain
from kiln.actions import spec as action_spec
from kiln.actions import temp_state
from kiln.actions.inductor_cache import cpu_target_env
from kiln.actions.spec import ActionFailure
from kiln.actions.temp_state import pin_temp_dirs
from kiln.actions.tensorrt import package_archive, package_facts
from kiln.actions.tensorrt.package_facts import inline_engines
from kiln.package_specs import PackageEngine, PackageWeights, TrtRefitSpec, WeightsHow

SWAPPED = (
    "the package's engine objects ({records}) replaced with the refit engines; its "
    "compiled wrapper is AotiPackage's, built once per structure"
)


def main(spec: TrtRefitSpec) -> None:
    output = Path(spec.output).resolve()
    with temp_state.private_cache(cache_name(spec)) as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
        os.environ.update(cpu_target_env(spec.provenance.cpu_target))
        import torch

        from kiln.actions.tensorrt import engine_refit

        try:
            direct = engine_refit.refit_package(
                Path(spec.package), Path(spec.refit.weights), Path(spec.refit.structure)
            )
        except engine_refit.NotDirect as error:
            print(f"kiln: refit through Torch-TensorRT, since {error}")
            pin_temp_dirs()  # its AOTInductor save may compile (the direct path never does)
            _through_torch_tensorrt(spec, output, cache, torch, direct_refused=str(error))
        else:
            _finish(
                spec,
                output,
                torch,
                source=Path(spec.package),
                replace=direct.replace,
                how="refit",
                detail=f"{direct.detail}; "
                + SWAPPED.format(records=", ".join(sorted(direct.replace))),
                engines=tuple(
                    package_facts.engine_entry(name, direct.records.get(name), data)
                    for name, data in sorted(direct.engines.items())
                ),
                trt=package_facts.installed_toolchain(torch, engine_refit.tensorrt_module()),
            )


def _through_torch_tensorrt(
    spec: TrtRefitSpec, output: Path, cache: Path, torch: Any, *, direct_refused: str
) -> None:
    """Torch-TensorRT's refit_module_weights, then the engines swapped into the package (or
    the refit module packaged again where they cannot be)."""
    from kiln.actions.tensorrt import aoti_backend
    from kiln.actions.tensorrt import refit as trt_refit
    from kiln.actions.tensorrt.compiler import import_torch_tensorrt

    torch_tensorrt = import_torch_tensorrt()
    _, trt_gm, _, _, weights = trt_refit.refitted(
        torch_tensorrt,
        spec.refit,
        list(aoti_backend.examples(spec.signature, spec.device)),
        device=spec.device,
        settings=aoti_backend.compile_settings(spec.tensorrt, spec.torch_executed_ops),
        ranges=spec.signature.ranges(),
    )
    engines = package_facts.all_engines(trt_gm)
    unread: str | None = None
    try:
        records = package_archive.engine_records(Path(spec.package))
    except ActionFailure as error:  # a layout this code does not know: package again
        records, unread = {}, str(error)
    # Unpickling the package's engine objects deserializes each engine (1.1 s for
    # ResNet-18's 53 MB on the H100): only where constant names do not pair them.
    in_package = (
        engine_names(Path(spec.package), records) if _needs_names(engines, records) else None
    )
    why_not = (
        (unread or swap_refused(trt_gm, engines, records, in_package))
        if weights.refit
        else weights.how
    )
    how: WeightsHow = "refit" if weights.refit else "built"
    # Why TensorRT's Refitter was not used on the package's engines directly
    # (kiln.actions.tensorrt.engine_refit): the manifest says it.
    refused = f" (TensorRT's Refitter not used directly, since {direct_refused})"
    if why_not is None:
        engines = _paired(engines, records, in_package)
        replace = {records[name]: pickled(engine) for name, engine in engines}
        detail = f"{weights.how}{refused}; " + SWAPPED.format(records=", ".join(sorted(replace)))
        source = Path(spec.package)
    else:
        started = time.monotonic()
        source = cache / "saved" / output.name
        aoti_backend.save(
            trt_gm,
            source,
            device=spec.device,
            signature=spec.signature,
            inductor_configs=spec.inductor_configs,
        )
        records = package_archive.engine_records(source)
        replace = {}
        seconds = time.monotonic() - started
        detail = (
            f"{weights.how}{refused}; packaged again with the AOTInductor save "
            f"({seconds:.1f} s), since {why_not}"
            if weights.refit
            else weights.how
        )
    _finish(
        spec,
        output,
        torch,
        source=source,
        replace=replace,
        how=how,
        detail=detail,
        engines=package_facts.engine_entries(engines, records),
        trt=package_facts.toolchain(torch, torch_tensorrt),
    )


def _finish(
    spec: TrtRefitSpec,
    output: Path,
    torch: Any,
    *,
    source: Path,
    replace: dict[str, bytes],
    how: WeightsHow,
    detail: str,
    engines: tuple[PackageEngine, ...],
    trt: TrtToolchain,
) -> None:
    """The package with its kiln.* metadata, and its manifest."""
    gpu = package_facts.build_gpu(torch)
    weights_digest = package_facts.file_digest(Path(spec.refit.weights))
    kiln = package_facts.metadata(
        spec.provenance,
        compile_digest=package_facts.file_digest(Path(spec.refit.compiled)),
        program_digest=package_facts.file_digest(Path(spec.package)),
        weights_digest=weights_digest,
        weights_file=Path(spec.refit.weights).name,
        how=how,
        engines=engines,
        trt=trt,
        gpu=gpu,
    )
    package_archive.rewrite(source, output, replace=replace, metadata=kiln)
    package_facts.write_manifest(
        Path(spec.manifest),
        spec.provenance,
        output,
        weights=PackageWeights(how=how, detail=detail, sha256=weights_digest, form="packaged"),
        engines=engines,
        trt=trt,
        gpu=gpu,
        kiln_metadata=kiln,
    )
    print(f"{how}: {detail}")


def swap_refused(
    trt_gm: Any,
    engines: list[tuple[str, Any]],
    records: dict[str, str],
    in_package: dict[str, str] | None = None,
) -> str | None:
    """Why the refit engines cannot simply replace the package's, or None."""
    own = outside_engines(trt_gm)
    if own:
        listed = ", ".join(own[:5])
        return (
            f"the program around the engines reads {len(own)} weight(s) of its own "
            f"({listed}), compiled into the package's wrapper"
        )
    if not inline_engines(trt_gm):
        return "the refit module calls no engine inline"
    try:
        _paired(engines, records, in_package)
    except KeyError as error:
        return str(error.args[0])
    return None


def outside_engines(trt_gm: Any) -> list[str]:
    """Tensors the refit module's graph reads besides its engines (parameters, buffers,
    constants of ops left to PyTorch): what the package's wrapper was compiled with."""
    import torch

    from kiln.actions.tensorrt.engine import _attribute

    return sorted(
        {
            str(node.target)
            for node in trt_gm.graph.nodes
            if node.op == "get_attr"
            and node.users
            and isinstance(_attribute(trt_gm, node.target), torch.Tensor)
        }
    )


def _paired(
    engines: list[tuple[str, Any]],
    records: dict[str, str],
    in_package: dict[str, str] | None = None,
) -> list[tuple[str, Any]]:
    """(the package's constant name, the refit engine) for every engine: by constant name;
    else by the engine's own name (its serialized state's NAME_IDX, `in_package` for the
    package's objects); a package of one engine under another name takes the one."""
    names = {name for name, _ in engines}
    if names == set(records):
        return list(engines)
    if len(engines) == 1 and len(records) == 1:
        return [(next(iter(records)), engines[0][1])]
    if in_package and set(in_package) == set(records):
        by_state = {engine_name(engine): engine for _, engine in engines}
        if len(by_state) == len(engines) and set(in_package.values()) == set(by_state):
            return [(constant, by_state[name]) for constant, name in sorted(in_package.items())]
    raise KeyError(
        f"the package's engine constants ({', '.join(sorted(records)) or 'none'}) are not "
        f"the refit module's ({', '.join(sorted(names))})"
    )


def _needs_names(engines: list[tuple[str, Any]], records: dict[str, str]) -> bool:
    """Whether _paired must read the engines' own names to pair them."""
    same = {name for name, _ in engines} == set(records)
    return not same and not (len(engines) == 1 and len(records) == 1)


def engine_name(engine: Any) -> str:
    """The name an engine object carries in its serialized state (Torch-TensorRT's
    NAME_IDX: the TensorRT submodule it was built for)."""
    from kiln.actions.tensorrt.engine import _runtime_constant

    state = engine.__getstate__()
    info = state[0] if state and isinstance(state[0], (list, tuple)) else state
    return str(info[_runtime_constant("NAME_IDX", 1)])


def engine_names(package: Path, records: dict[str, str]) -> dict[str, str] | None:
    """{constant: engine_name} of the package's engine objects, unpickled (the Torch-TensorRT
    runtime registers their class); None where one cannot be read."""
    import torch
    from torch.export.pt2_archive import PT2ArchiveReader

    try:
        with PT2ArchiveReader(str(package)) as reader:
            return {
                constant: engine_name(torch._C._pickle_load_obj(reader.read_bytes(record)))
                for constant, record in records.items()
            }
    except Exception:  # a name that cannot be read only rules out this match
        return None


def pickled(engine: Any) -> bytes:
    """An engine object as AOTInductor saves a TorchBind constant (codecache.py)."""
    import torch

    return bytes(torch._C._pickle_save(engine))


def cache_name(spec: TrtRefitSpec) -> str:
    """As kiln.actions.tensorrt.aoti_package.cache_name: the spec without its paths and
    the program package's bytes."""
    blank = spec.model_copy(
        update={
            "package": "",
            "output": "",
            "manifest": "",
            "refit": spec.refit.model_copy(update={"compiled": "", "structure": "", "weights": ""}),
        }
    )
    digest = hashlib.sha256(blank.to_json().encode())
    with open(spec.package, "rb") as package:
        digest.update(hashlib.file_digest(package, "sha256").digest())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    action_spec.run(main, TrtRefitSpec, sys.argv[1:], quiet=True)
