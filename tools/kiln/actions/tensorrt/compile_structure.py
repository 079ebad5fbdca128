"""TrtCompile: a program's structure into a refittable Torch-TensorRT program (Linux).

    structure (<name>.structure.pt2: meta tensors for weights, kiln.actions.weights_split;
               loaded with placeholders in their place)
      -> torch_tensorrt.dynamo.compile(..., immutable_weights=False)
      -> torch_tensorrt.save(...) -> <name>.refittable.ep

Built once per architecture (its inputs hold no weight values); TrtEngine refits
each weights change into it with torch_tensorrt.dynamo.refit_module_weights
(kiln.actions.tensorrt.refit) instead of building an engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kiln.action_specs import TrtCompileSpec
from kiln.actions import spec as action_spec
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt.compiler import REFITTABLE


def main(spec: TrtCompileSpec) -> None:
    import torch

    from kiln.actions import weights_split
    from kiln.actions.model_loading import dynamic_shapes, example_inputs
    from kiln.actions.tensorrt.compiler import compile_program, import_torch_tensorrt
    from kiln.actions.tensorrt.engine import save_program

    torch_tensorrt = import_torch_tensorrt()
    program = weights_split.load_structure(spec.structure, spec.device)
    settings = {**spec.settings, **REFITTABLE}
    trt_gm, _, dropped = compile_program(
        torch_tensorrt, program, spec.ranges, settings, windows=False
    )
    if "immutable_weights" in dropped:
        raise ActionFailure(
            f"torch_tensorrt {getattr(torch_tensorrt, '__version__', '?')} has no "
            "immutable_weights setting, so it cannot build refittable engines: set "
            "refit = False on the target"
        )
    device = torch.device(spec.device)
    examples = [t.to(device) for t in example_inputs(spec.signature.inputs)]
    save_program(
        torch_tensorrt,
        trt_gm,
        Path(spec.output),
        examples,
        windows=False,
        shapes=dynamic_shapes(spec.signature),
    )


if __name__ == "__main__":
    action_spec.run(main, TrtCompileSpec, sys.argv[1:])
