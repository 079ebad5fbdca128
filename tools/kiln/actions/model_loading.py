"""Building the user's model in an action: import the factory, load weights, make inputs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from kiln.action_specs import ModelSignature, ModelSource, TensorSpec
from kiln.actions.spec import ActionFailure

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "bool": torch.bool,
}


def build_model(model: ModelSource) -> torch.nn.Module:
    """Import `module:function` from the model's source directory and call it."""
    src = Path(model.src)
    module_name, _, function_name = model.factory.partition(":")
    directory = str(src.parent.resolve())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ActionFailure(
            f"cannot import '{module_name}' from {src}: {type(error).__name__}: {error}"
        ) from error
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ActionFailure(
            f"{src} defines no function '{function_name}' (factory {model.factory})"
        )
    # Models without weights are initialized randomly: seed it, so export and
    # validation (separate processes) build the very same model.
    torch.manual_seed(model.seed)
    try:
        built = factory(**model.factory_kwargs)
    except Exception as error:
        raise ActionFailure(
            f"factory {model.factory} raised {type(error).__name__}: {error}"
        ) from error
    if not isinstance(built, torch.nn.Module):
        raise ActionFailure(
            f"factory {model.factory} returned {type(built).__name__}, not a torch.nn.Module"
        )
    if model.weights:
        load_weights(built, Path(model.weights))
    return built.eval()


def load_weights(module: torch.nn.Module, path: Path) -> None:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    result = module.load_state_dict(state, strict=False)
    problems = []
    if result.missing_keys:
        problems.append(
            f"missing keys: {', '.join(result.missing_keys[:5])}"
            + (" ..." if len(result.missing_keys) > 5 else "")
        )
    if result.unexpected_keys:
        problems.append(
            f"unexpected keys: {', '.join(result.unexpected_keys[:5])}"
            + (" ..." if len(result.unexpected_keys) > 5 else "")
        )
    if problems:
        raise ActionFailure(f"weights {path} do not match the model ({'; '.join(problems)})")


def example_inputs(
    inputs: tuple[TensorSpec, ...],
    shapes: dict[str, tuple[int, ...]] | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Deterministic example tensors (same seed, same bytes) of the declared specs."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in inputs:
        shape = (shapes or {}).get(spec.name, spec.shape)
        dtype = DTYPES[spec.dtype]
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            tensor = torch.randint(0, 10, shape, generator=generator).to(dtype)
        tensors.append(tensor)
    return tuple(tensors)


def dynamic_shapes(signature: ModelSignature) -> tuple[dict[int, Any], ...] | None:
    """torch.export's dynamic_shapes, by position (input names need not match forward()'s
    parameter names): a torch.export.Dim on every axis a dynamic dim binds."""
    if not signature.dynamic_dims:
        return None
    shapes: dict[str, dict[int, Any]] = {spec.name: {} for spec in signature.inputs}
    for dim in signature.dynamic_dims:
        tdim = torch.export.Dim(dim.name, min=dim.min, max=dim.max)
        for input_name, axis in dim.axes.items():
            shapes[input_name][axis] = tdim
    return tuple(shapes[spec.name] for spec in signature.inputs)
