"""The refit of TrtEngine and of a Torch-TensorRT AotiPackage: the weights into the
refittable program TrtCompile built.

    compiled = torch_tensorrt.load("<name>.refittable.ep")
    program  = the structure with the weights put back (kiln.actions.weights_split)
    trt_gm   = torch_tensorrt.dynamo.refit_module_weights(compiled, program,
                                                          arg_inputs=..., verify_output=True)

No engine is built: TensorRT copies the new values into the engines (Torch-TensorRT's
weight map finds them by name), and verify_output compares the refit module with the
program on the example inputs. Where this Torch-TensorRT cannot refit
(ENABLED_FEATURES.refit False, no refit_module_weights, or NotImplementedError from
it), the program with its weights is compiled as a build without refit would, and
the manifest says so (TrtWeights).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kiln.action_specs import ShapeRange, TrtRefit, TrtWeights
from kiln.actions.spec import ActionFailure

REFIT = "torch_tensorrt.dynamo.refit_module_weights"


def unavailable(torch_tensorrt: Any) -> str | None:
    """Why this Torch-TensorRT cannot refit, or None if it can."""
    version = getattr(torch_tensorrt, "__version__", "?")
    if not getattr(torch_tensorrt.ENABLED_FEATURES, "refit", False):
        return f"torch_tensorrt {version} has ENABLED_FEATURES.refit False"
    if getattr(torch_tensorrt.dynamo, "refit_module_weights", None) is None:
        return f"torch_tensorrt {version} has no {REFIT}"
    return None


def refitted(
    torch_tensorrt: Any,
    refit: TrtRefit,
    examples: list[Any],
    *,
    device: str,
    settings: Mapping[str, Any],
    ranges: tuple[ShapeRange, ...],
) -> tuple[Any, Any, dict[str, Any], list[str], TrtWeights]:
    """(the program with its weights, the compiled module holding them, the compile settings
    in effect, those the installed version lacks, how the weights got in).

    `settings` and `ranges` are those TrtCompile built with: a build without refit
    compiles the program with them."""
    from safetensors.torch import load_file

    from kiln.actions import weights_split
    from kiln.actions.tensorrt import refit_constants
    from kiln.actions.tensorrt.compiler import (
        COMPILE,
        REFITTABLE,
        accepted_settings,
        compile_program,
    )
    from kiln.actions.tensorrt.compiler import brief as _brief

    program = weights_split.load_structure(refit.structure, device)
    weights_split.restore(program, load_file(refit.weights))
    digest = hashlib.sha256(Path(refit.weights).read_bytes()).hexdigest()
    settings = {**settings, **REFITTABLE}
    why_not = unavailable(torch_tensorrt)
    if why_not is None:
        refit_fn = torch_tensorrt.dynamo.refit_module_weights
        wanted = {
            "arg_inputs": tuple(examples),
            "verify_output": True,
            "in_place": False,
            "use_weight_map_cache": True,  # 2.11 and 2.12 name it; 2.13 always does
        }
        kwargs, _ = accepted_settings(refit_fn, wanted)
        # Torch-TensorRT's own refit module, whose per-engine step the eps fix wraps
        steps = getattr(torch_tensorrt.dynamo, "_refit", None)
        try:
            compiled = _as_module(torch_tensorrt.load(refit.compiled))
            with refit_constants.eps_in_weight_maps(steps):
                trt_gm = refit_fn(compiled, program, **kwargs)
        except NotImplementedError as error:  # what @needs_refit raises
            why_not = f"{REFIT} raised {_brief(error)}"
        except Exception as error:
            raise ActionFailure(f"{REFIT} failed: {_brief(error)}") from error
        else:
            passed, dropped = accepted_settings(torch_tensorrt.dynamo.compile, settings)
            how = (
                f"refit with {REFIT} into the program TrtCompile built from the model's "
                f"structure ({COMPILE}, immutable_weights False): no engine build"
            )
            return (
                program,
                trt_gm,
                passed,
                dropped,
                TrtWeights(refit=True, how=how, weights_sha256=digest),
            )
    trt_gm, passed, dropped = compile_program(
        torch_tensorrt, program, ranges, settings, windows=False
    )
    how = f"built with the weights, since {why_not}: a change of weights rebuilds the engine"
    return program, trt_gm, passed, dropped, TrtWeights(refit=False, how=how, weights_sha256=digest)


def _as_module(compiled: Any) -> Any:
    """The loaded refittable program as the module refit expects: without guards.

    torch 2.11's ExportedProgram.module() adds a `_guards_fn` child. Torch-TensorRT
    2.11's refit_module_weights then takes the module for one with TensorRT
    submodules (a loaded program's engines are inline, in no child), finds none, and
    fails on a bare `assert settings is not None` (dynamo/_refit.py:339; seen on the
    H200, 2026-12-01). Without the guards child it takes the inline path."""
    from torch.export import ExportedProgram

    if not isinstance(compiled, ExportedProgram):
        return compiled
    try:
        return compiled.module(check_guards=False)
    except TypeError:  # a torch before check_guards adds no guards child either
        return compiled.module()
