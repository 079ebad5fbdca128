"""The Torch-TensorRT route of AotiPackage and AotiRefit, as the Torch-TensorRT AOTInductor
guide shows.

    trt_gm = torch_tensorrt.dynamo.compile(program, inputs=[Input(min, opt, max)], ...)
             or TrtCompile's refittable program, loaded (torch_tensorrt.load)
    torch_tensorrt.save(trt_gm, "<name>.pt2", output_format="aot_inductor",
                        retrace=True, arg_inputs=..., dynamic_shapes=...,
                        inductor_configs=<the target's>)

Saved with the target's dynamic shapes (the program is otherwise specialised to the
example batch, as trt_engine's first GPU run found) and its inductor_configs (which
Torch-TensorRT's save hands to aoti_compile_and_package). The compile is TrtEngine's
(kiln.actions.tensorrt.compiler): one settings policy, Torch-TensorRT's engine cache off
(kiln's keys decide reuse), a timing cache of the action's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.action_specs import ModelSignature, TensorRTSettings
from kiln.actions.model_loading import dynamic_shapes, example_inputs
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt.compiler import compile_program, import_torch_tensorrt
from kiln.actions.tensorrt.engine import _accepts


def compiled(
    torch_tensorrt: Any,
    program: Any,
    signature: ModelSignature,
    settings: dict[str, Any],
    scratch: Path,
) -> Any:
    """The exported program (its weights inside) compiled: TrtEngine's compile."""
    trt_gm, _, _ = compile_program(
        torch_tensorrt, program, signature.ranges(), settings, windows=False, scratch=scratch
    )
    return trt_gm


def compile_settings(
    settings: TensorRTSettings, torch_executed_ops: tuple[str, ...]
) -> dict[str, Any]:
    """torch_tensorrt.dynamo.compile's keyword arguments for the target."""
    extra = {"torch_executed_ops": list(torch_executed_ops)} if torch_executed_ops else {}
    return {**settings.compile_kwargs(), **extra}


def loaded(torch_tensorrt: Any, path: str) -> Any:
    """TrtCompile's refittable program as a module (engines inline), as refit takes it."""
    import torch

    from kiln.actions.tensorrt.refit import _as_module

    module = _as_module(torch_tensorrt.load(path))
    return module if isinstance(module, torch.nn.Module) else module.module()


def save(
    trt_gm: Any,
    output: Path,
    *,
    device: str,
    signature: ModelSignature,
    inductor_configs: dict[str, Any],
) -> None:
    """torch_tensorrt.save(..., output_format="aot_inductor", retrace=True) with the
    target's dynamic shapes and inductor_configs."""
    torch_tensorrt = import_torch_tensorrt()
    extra: dict[str, Any] = {"inductor_configs": dict(inductor_configs)}
    if _accepts(torch_tensorrt.save, "dynamic_shapes"):
        extra["dynamic_shapes"] = dynamic_shapes(signature)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch_tensorrt.save(
            trt_gm,
            str(output),
            output_format="aot_inductor",
            retrace=True,
            arg_inputs=list(examples(signature, device)),
            **extra,
        )
    except Exception as error:
        raise ActionFailure(
            f"Torch-TensorRT packaging failed: {type(error).__name__}: {str(error).strip()[:2000]}"
        ) from error


def examples(signature: ModelSignature, device: str) -> tuple[Any, ...]:
    import torch

    where = torch.device(device)
    return tuple(t.to(where) for t in example_inputs(signature.inputs))
