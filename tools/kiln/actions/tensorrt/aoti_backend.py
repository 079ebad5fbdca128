"""The Torch-TensorRT route of AotiPackage, as the Torch-TensorRT AOTInductor guide shows.

    trt_gm = torch_tensorrt.dynamo.compile(program, inputs=[Input(min, opt, max)], ...)
             or, where the toolchain can refit (package_refit), TrtCompile's refittable
             program with the weights refit in (kiln.actions.tensorrt.refit): no engine build
    torch_tensorrt.save(trt_gm, "<name>.pt2", output_format="aot_inductor",
                        retrace=True, arg_inputs=...)

The compile is TrtEngine's (kiln.actions.tensorrt.compiler): the same policy for which
settings the installed Torch-TensorRT accepts, Torch-TensorRT's engine cache off
(kiln's keys decide reuse), a timing cache of the action's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.action_specs import PackageSpec, TensorRTSettings, TrtRefit
from kiln.actions.model_loading import example_inputs
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt.compiler import compile_program, import_torch_tensorrt


def package(
    program: Any, spec: PackageSpec, settings: TensorRTSettings, output: Path, scratch: Path
) -> None:
    """Compile the exported program (its weights inside) and save it as a .pt2: the same
    compile as TrtEngine's (kiln.actions.tensorrt.compiler: one settings policy, the engine
    cache off)."""
    torch_tensorrt = import_torch_tensorrt()
    trt_gm, _, _ = compile_program(
        torch_tensorrt,
        program,
        spec.signature.ranges(),
        settings.compile_kwargs(),
        windows=False,
        scratch=scratch,
    )
    _save(torch_tensorrt, trt_gm, spec, output)


def package_refit(
    spec: PackageSpec, settings: TensorRTSettings, refit: TrtRefit, output: Path
) -> str:
    """Refit the weights into TrtCompile's refittable program (kiln.actions.tensorrt.refit:
    no engine build where the toolchain can refit) and save it as a .pt2; how the
    weights got in."""
    from kiln.actions.tensorrt import refit as trt_refit

    torch_tensorrt = import_torch_tensorrt()
    examples = list(_examples(spec))
    _, trt_gm, _, _, weights = trt_refit.refitted(
        torch_tensorrt,
        refit,
        examples,
        device=spec.device,
        settings=settings.compile_kwargs(),
        ranges=spec.signature.ranges(),
    )
    _save(torch_tensorrt, trt_gm, spec, output)
    return weights.how


def _examples(spec: PackageSpec) -> tuple[Any, ...]:
    import torch

    device = torch.device(spec.device)
    return tuple(t.to(device) for t in example_inputs(spec.signature.inputs))


def _save(torch_tensorrt: Any, trt_gm: Any, spec: PackageSpec, output: Path) -> None:
    try:
        torch_tensorrt.save(
            trt_gm,
            str(output),
            output_format="aot_inductor",
            retrace=True,
            arg_inputs=list(_examples(spec)),
        )
    except Exception as error:
        raise _failed(error) from error


def _failed(error: Exception) -> ActionFailure:
    return ActionFailure(
        f"Torch-TensorRT packaging failed: {type(error).__name__}: {str(error).strip()[:2000]}"
    )
