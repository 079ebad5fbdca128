"""The Torch-TensorRT route of AotiPackage, as the Torch-TensorRT AOTInductor guide shows.

    trt_gm = torch_tensorrt.dynamo.compile(program, inputs=[Input(min, opt, max)], ...)
             or, where the toolchain can refit (package_refit), TrtCompile's refittable
             program with the weights refit in (kiln.actions.trt_refit): no engine build
    torch_tensorrt.save(trt_gm, "<name>.pt2", output_format="aot_inductor",
                        retrace=True, arg_inputs=...)

Settings are passed only when the installed Torch-TensorRT accepts them:
2.13 removed `use_explicit_typing` and `enabled_precisions` (strong typing
is always on), and passing them there is an error. Each action gets its own
TensorRT timing cache (the default is one file under /tmp that every build
rewrites).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from kiln.action_specs import PackageSpec, TensorRTSettings, TrtRefit
from kiln.actions.model_loading import DTYPES, example_inputs
from kiln.actions.spec import ActionFailure
from kiln.actions.trt_engine import import_torch_tensorrt


def compile_settings(compile_fn: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """The settings `compile_fn` accepts; unknown ones are dropped (recorded by the caller)."""
    accepted = inspect.signature(compile_fn).parameters
    has_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    return {
        k: v
        for k, v in wanted.items()
        if k in accepted or (has_kwargs and k != "use_explicit_typing")
    }


def package(
    program: Any, spec: PackageSpec, settings: TensorRTSettings, output: Path, scratch: Path
) -> None:
    """Compile the exported program (its weights inside) and save it as a .pt2."""
    import torch_tensorrt

    inputs = [
        torch_tensorrt.Input(
            min_shape=list(r.min),
            opt_shape=list(r.opt),
            max_shape=list(r.max),
            dtype=DTYPES[r.dtype],
        )
        for r in spec.signature.ranges()
    ]
    wanted = settings.compile_kwargs()
    wanted["timing_cache_path"] = str(scratch / "timing.cache")
    accepted = compile_settings(torch_tensorrt.dynamo.compile, wanted)
    try:
        trt_gm = torch_tensorrt.dynamo.compile(program, inputs=inputs, **accepted)
    except Exception as error:
        raise _failed(error) from error
    _save(torch_tensorrt, trt_gm, spec, output)


def package_refit(
    spec: PackageSpec, settings: TensorRTSettings, refit: TrtRefit, output: Path
) -> str:
    """Refit the weights into TrtCompile's refittable program (kiln.actions.trt_refit:
    no engine build where the toolchain can refit) and save it as a .pt2; how the
    weights got in."""
    from kiln.actions import trt_refit

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
