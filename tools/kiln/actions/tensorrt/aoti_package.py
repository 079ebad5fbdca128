"""AotiPackage, backend "tensorrt": Torch-TensorRT's AOTInductor packaging (.pt2).

    compiled   TrtCompile's refittable program, packaged as it is -> <name>.program.pt2:
               once per structure; AotiRefit (kiln.actions.tensorrt.aoti_refit) gives
               it the refit engines for each change of weights, without recompiling it
    otherwise  the exported program with its weights: torch_tensorrt.dynamo.compile,
               the AOTInductor save, the kiln.* metadata -> <name>.pt2 + manifest

Saved as kiln.actions.tensorrt.aoti_backend says (dynamic shapes, inductor_configs).
The private cache and the CPU target of the wrapper: kiln.actions.inductor_cache.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from kiln.actions import spec as action_spec
from kiln.actions import temp_state
from kiln.actions.inductor_cache import cpu_target_env
from kiln.actions.temp_state import pin_temp_dirs
from kiln.package_specs import PackageWeights, TrtPackageSpec


def main(spec: TrtPackageSpec) -> None:
    output = Path(spec.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with temp_state.private_cache(cache_name(spec)) as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
        os.environ.update(cpu_target_env(spec.provenance.cpu_target))
        pin_temp_dirs()
        import torch

        from kiln.actions.tensorrt import aoti_backend, package_archive, package_facts
        from kiln.actions.tensorrt.compiler import import_torch_tensorrt

        torch_tensorrt = import_torch_tensorrt()
        save = {
            "device": spec.device,
            "signature": spec.signature,
            "inductor_configs": spec.inductor_configs,
        }
        if spec.compiled:
            module = aoti_backend.loaded(torch_tensorrt, spec.program)
            aoti_backend.save(module, output, **save)  # type: ignore[arg-type]
            return
        program = torch.export.load(spec.program)
        settings = aoti_backend.compile_settings(spec.tensorrt, spec.torch_executed_ops)
        trt_gm = aoti_backend.compiled(torch_tensorrt, program, spec.signature, settings, cache)
        saved = cache / "saved" / output.name
        aoti_backend.save(trt_gm, saved, **save)  # type: ignore[arg-type]
        from kiln.actions.tensorrt.engine import find_engines

        engines = package_facts.engine_entries(
            [(f"{name}_engine", holder) for name, holder in find_engines(trt_gm)],
            package_archive.engine_records(saved),
        )
        trt = package_facts.toolchain(torch, torch_tensorrt)
        gpu = package_facts.build_gpu(torch)
        digest = package_facts.file_digest(Path(spec.program))
        kiln = package_facts.metadata(
            spec.provenance,
            compile_digest=digest,
            program_digest=digest,
            weights_digest=None,
            weights_file=None,
            how="built",
            engines=engines,
            trt=trt,
            gpu=gpu,
        )
        package_archive.rewrite(saved, output, replace={}, metadata=kiln)
        assert spec.manifest is not None
        package_facts.write_manifest(
            Path(spec.manifest),
            spec.provenance,
            output,
            weights=PackageWeights(
                how="built",
                detail="engines built with the weights (refit = False on the target, or "
                "the toolchain cannot refit): a change of weights rebuilds them",
                sha256=None,
                form="packaged",
            ),
            engines=engines,
            trt=trt,
            gpu=gpu,
            kiln_metadata=kiln,
        )


def cache_name(spec: TrtPackageSpec) -> str:
    """The private inductor cache's name (the package's bytes embed its path): named
    after what is compiled, the spec without its paths and the program's bytes, never
    after the paths, which name the output root (as kiln.actions.inductor_cache does)."""
    blank = spec.model_copy(update={"program": "", "output": "", "manifest": None})
    digest = hashlib.sha256(blank.to_json().encode())
    with open(spec.program, "rb") as program:
        digest.update(hashlib.file_digest(program, "sha256").digest())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    action_spec.run(main, TrtPackageSpec, sys.argv[1:], quiet=True)
