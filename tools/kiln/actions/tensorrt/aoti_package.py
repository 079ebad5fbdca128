"""AotiPackage: compile an exported program into an AOTInductor .pt2 package.

Backend "tensorrt": torch_tensorrt.dynamo.compile with Input(min, opt, max) ranges
(or, with the spec's `refit`, TrtCompile's refittable program with the weights refit
in), then torch_tensorrt.save(..., output_format="aot_inductor", retrace=True), as the
Torch-TensorRT AOTInductor guide shows (kiln.actions.tensorrt.aoti_backend). Backend
"inductor" compiles the program's structure once and joins the weights after:
kiln.actions.aoti_compile and kiln.actions.aoti_join.

The private cache and the CPU target: kiln.actions.inductor_cache.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kiln.action_specs import PackageSpec
from kiln.actions import spec as action_spec
from kiln.actions.inductor_cache import cpu_target_env, private_inductor_cache
from kiln.actions.spec import ActionFailure
from kiln.actions.temp_state import pin_temp_dirs


def main(spec: PackageSpec) -> None:
    output = Path(spec.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with private_inductor_cache(spec) as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
        os.environ.update(cpu_target_env(spec.cpu_target))
        pin_temp_dirs()
        import torch

        if spec.tensorrt is None:
            raise ActionFailure(
                "AotiPackage builds Torch-TensorRT packages; an AOTInductor package is "
                "AotiCompile (the structure) and AotiJoin (the weights)"
            )
        from kiln.actions.tensorrt import aoti_backend as tensorrt_backend

        if spec.refit is not None:
            print(tensorrt_backend.package_refit(spec, spec.tensorrt, spec.refit, output))
        else:
            program = torch.export.load(spec.program)
            tensorrt_backend.package(program, spec, spec.tensorrt, output, cache)


if __name__ == "__main__":
    action_spec.run(main, PackageSpec, sys.argv[1:], quiet=True)
