"""Building the user's model in an action: import the factory, load weights, make inputs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from kiln.action_specs import ModelSignature, ModelSource, TensorSpec
from kiln.actions.errors import ActionError, summary, user_location

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


def build_model(model: ModelSource, label: str | None = None) -> torch.nn.Module:
    """Import `module:function` from the model's source directory and call it.

    `label` (the torch_model's) names the target in errors; an error inside the
    user's code names its file and line.
    """
    src = Path(model.src)
    module_name, _, function_name = model.factory.partition(":")
    directory = str(src.parent.resolve())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    if model.torchvision_cpu_ops:
        from kiln.actions import torchvision_cpu

        torchvision_cpu.define_ops()
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ActionError(
            f"cannot import '{module_name}' from {src}: {summary(error)}",
            label=label,
            location=user_location(error),
            hint=_import_hint(error, model, label),
            cause=error,
        ) from error
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ActionError(
            f"{src} defines no function '{function_name}' (factory {model.factory})",
            label=label,
            hint=f"set factory of {label} to 'module:function' of a function in {src}"
            if label
            else None,
        )
    # Models without weights are initialized randomly: seed it, so export and
    # validation (separate processes) build the very same model.
    torch.manual_seed(model.seed)
    try:
        built = factory(**model.factory_kwargs)
    except Exception as error:
        raise ActionError(
            f"the factory {model.factory} raised {summary(error)}",
            label=label,
            location=user_location(error),
            hint=_factory_hint(error, model, label),
            cause=error,
        ) from error
    if not isinstance(built, torch.nn.Module):
        raise ActionError(
            f"the factory {model.factory} returned {type(built).__name__}, not a torch.nn.Module",
            label=label,
        )
    if model.weights:
        load_weights(built, Path(model.weights), label)
    return built.eval()


def _import_hint(error: Exception, model: ModelSource, label: str | None) -> str | None:
    if isinstance(error, ModuleNotFoundError):
        return missing_module_hint(error.name or "", model, label)
    return None


def missing_module_hint(name: str, model: ModelSource, label: str | None) -> str:
    """What to declare when the model imports a module its environment does not hold.

    The environment holds the toolchain and the locked closure of the target's
    `@pip//` deps, nothing else; the execroot holds its declared files.
    """
    top = name.split(".", 1)[0]
    declared = ", ".join(_short_label(d) for d in model.python_deps)
    target = f"deps of {label}" if label else "the target's deps"
    return (
        f"if '{top}' is a third-party package, lock it and add \"@pip//{top.lower()}\" (its "
        f"distribution's name) to {target}"
        + (f" (it declares {declared})" if declared else " (it declares no packages)")
        + f"; if it is a file of the workspace, add {top}.py (or its folder's files) to deps"
    )


def _short_label(label: str) -> str:
    """`@pip//timm:timm` -> `@pip//timm`, as BUILD files write it."""
    package, _, name = label.rpartition(":")
    return package if package.rsplit("/", 1)[-1] == name else label


def _factory_hint(error: Exception, model: ModelSource, label: str | None) -> str | None:
    if isinstance(error, ModuleNotFoundError):
        return missing_module_hint(error.name or "", model, label)
    if isinstance(error, TypeError) and "argument" in str(error) and label:
        given = ", ".join(sorted(model.factory_kwargs)) or "none"
        return f"check factory_kwargs of {label} (given: {given}) against the factory's parameters"
    return None


def load_weights(module: torch.nn.Module, path: Path, label: str | None = None) -> None:
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
        raise ActionError(
            f"weights {path} do not match the model ({'; '.join(problems)})",
            label=label,
            hint=f"weights of {label} must be a state dict of the module its factory returns"
            if label
            else None,
        )


def example_inputs(
    inputs: tuple[TensorSpec, ...],
    shapes: dict[str, tuple[int, ...]] | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Deterministic example tensors (same seed, same bytes) of the declared specs.

    Integer inputs with a declared [low, high) are sampled across it, and hold both
    of its ends (the first and last element), so that a model that cannot take its
    whole declared range (token ids past the vocabulary) fails here, not in production.
    """
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
            low, high = spec.value_range or (0, 10)
            tensor = torch.randint(low, high, shape, generator=generator, dtype=torch.int64)
            if spec.value_range is not None and tensor.numel():
                flat = tensor.view(-1)
                flat[0], flat[-1] = low, high - 1
            tensor = tensor.to(dtype)
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
