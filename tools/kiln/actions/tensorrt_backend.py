"""The Torch-TensorRT route of AotiPackage, as the Torch-TensorRT AOTInductor guide shows.

    trt_gm = torch_tensorrt.dynamo.compile(program, inputs=[Input(min, opt, max)], ...)
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

from kiln.actions.model_loading import DTYPES, example_inputs
from kiln.actions.spec import ActionFailure


def input_ranges(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """min/opt/max shapes per input, from the example shapes and dynamic dims."""
    ranges = []
    for item in spec["inputs"]:
        lo, opt, hi = list(item["shape"]), list(item["shape"]), list(item["shape"])
        for dim in spec["dynamic_dims"]:
            axis = dim["axes"].get(item["name"])
            if axis is None:
                continue
            lo[axis], hi[axis] = dim["min"], dim["max"]
            opt[axis] = dim.get("opt") or item["shape"][axis]
        ranges.append(
            {"name": item["name"], "min": lo, "opt": opt, "max": hi, "dtype": item["dtype"]}
        )
    return ranges


def compile_settings(compile_fn: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """The settings `compile_fn` accepts; unknown ones are dropped (recorded by the caller)."""
    accepted = inspect.signature(compile_fn).parameters
    has_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    return {
        k: v
        for k, v in wanted.items()
        if k in accepted or (has_kwargs and k != "use_explicit_typing")
    }


def package(program: Any, spec: dict[str, Any], output: Path, scratch: Path) -> None:
    import torch
    import torch_tensorrt

    inputs = [
        torch_tensorrt.Input(
            min_shape=r["min"], opt_shape=r["opt"], max_shape=r["max"], dtype=DTYPES[r["dtype"]]
        )
        for r in input_ranges(spec)
    ]
    wanted = dict(spec["tensorrt"])
    if wanted.get("workspace_size") == 0:
        wanted.pop("workspace_size")
    wanted["timing_cache_path"] = str(scratch / "timing.cache")
    settings = compile_settings(torch_tensorrt.dynamo.compile, wanted)
    try:
        trt_gm = torch_tensorrt.dynamo.compile(program, inputs=inputs, **settings)
        args = tuple(t.cuda() for t in example_inputs(spec["inputs"]))
        torch_tensorrt.save(
            trt_gm, str(output), output_format="aot_inductor", retrace=True, arg_inputs=list(args)
        )
    except Exception as error:
        raise ActionFailure(
            f"Torch-TensorRT packaging failed: {type(error).__name__}: {str(error).strip()[:2000]}"
        ) from error
    del torch
