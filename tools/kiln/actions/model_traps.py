"""The known traps of exporting a model, each turned into an ActionError with a named hint.

    eager_failure(...)   the model raised on the declared inputs (at the example or
                         at a shape point): wrong dtype or rank of an input, token ids
                         past an embedding, a dynamic dim past the model's positions
    export_failure(...)  torch.export refused: a dynamic dim the model narrows or fixes
                         (torch's suggested fix kept whole), data-dependent control
                         flow, an output type it cannot flatten (Hugging Face use_cache)

Each names the torch_model whose attribute to change (its inputs, dynamic_dims or
code), never the aoti_package that happened to run it. Which input a failing op
received is found by identity: the innermost frame of the traceback that holds one
of the tensors the model was called with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from kiln.action_specs import ModelSignature, TensorSpec
from kiln.actions.errors import (
    ActionError,
    Shapes,
    at_point,
    chain,
    declared,
    first_line,
    frames,
    suggested_fixes,
    summary,
    user_location,
)

# -- the model raised -----------------------------------------------------------------


def eager_failure(
    error: Exception,
    *,
    label: str,
    signature: ModelSignature,
    args: Sequence[torch.Tensor],
    point: str,
    shapes: Shapes | None = None,
) -> ActionError:
    """The model raised when called on `args` (the declared inputs at `point`)."""
    location = user_location(error)
    where = at_point(point, shapes)
    message = f"the model fails in eager {where}: {summary(error)}"
    specs = signature.inputs
    hint = _embedding_hint(error, label, signature, args, shapes or {}, location)
    if hint is None:
        spec = _input_of_failing_op(error, specs, args)
        hint = _input_hint(error, label, specs, spec)
    return ActionError(message, label=label, location=location, hint=hint, cause=error)


def _innermost_locals(error: BaseException) -> list[dict[str, Any]]:
    """The local variables of each frame of the original exception, innermost first."""
    root = list(chain(error))[-1]
    return [entry.tb_frame.f_locals for entry in reversed(list(frames(root.__traceback__)))]


def _input_of_failing_op(
    error: BaseException, specs: Sequence[TensorSpec], args: Sequence[torch.Tensor]
) -> TensorSpec | None:
    """The declared input the innermost frame holding any input holds, if just one."""
    for local_vars in _innermost_locals(error):
        held = {i for i, arg in enumerate(args) for value in _values(local_vars) if value is arg}
        if len(held) == 1:
            return specs[held.pop()]
        if held:
            return None  # a frame with several inputs (the model's forward): cannot tell
    return None


def _values(local_vars: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for value in local_vars.values():
        if isinstance(value, tuple | list):
            out.extend(value)
        else:
            out.append(value)
    return out


_DTYPE_WORDS = re.compile(r"scalar type|dtype|Tensor instead|expected .*(Long|Int|Float)", re.I)
_SHAPE_WORDS = re.compile(
    r"\bsize\b|shape|dimension|channels|mat1 and mat2|\d+D|rank|expected input", re.I
)


def _input_hint(
    error: BaseException, label: str, specs: Sequence[TensorSpec], spec: TensorSpec | None
) -> str | None:
    text = str(error)
    if spec is None and len(specs) == 1:
        spec = specs[0]
    named = f"input '{spec.name}' is declared {declared(spec, named=False)}" if spec else None
    listed = "; ".join(declared(s) for s in specs)
    if _DTYPE_WORDS.search(text):
        if named:
            return f"{named} in inputs of {label}, a dtype the model does not take here: change it"
        return f"check the dtypes of the inputs of {label} ({listed})"
    if _SHAPE_WORDS.search(text):
        if named:
            return (
                f"{named} (rank {len(spec.shape) if spec else 0}) in inputs of {label}, a shape "
                "the model does not take here: change its shape (and dynamic_dims)"
            )
        return f"check the shapes of the inputs of {label} ({listed})"
    return None


def _embedding_hint(
    error: BaseException,
    label: str,
    signature: ModelSignature,
    args: Sequence[torch.Tensor],
    shapes: Shapes,
    location: str | None,
) -> str | None:
    """An index past an nn.Embedding's rows: token ids past the vocabulary, or a
    dynamic dim (positions) past the positions the model has."""
    if not isinstance(error, IndexError):
        return None
    for local_vars in _innermost_locals(error):
        weight, indices = local_vars.get("weight"), local_vars.get("input")
        if isinstance(weight, torch.Tensor) and isinstance(indices, torch.Tensor):
            break
    else:
        return None
    rows = int(weight.shape[0])
    at = f" at {location}" if location else ""
    for spec, arg in zip(signature.inputs, args, strict=True):
        if indices is arg:
            low, high = spec.value_range or (0, 10)
            if spec.value_range is None:
                return (
                    f"input '{spec.name}' indexes an embedding of {rows} rows{at}; declare the "
                    f"values it takes with low/high in inputs of {label}"
                )
            return (
                f"input '{spec.name}' is declared to take ids in [{low}, {high}), but the "
                f"embedding{at} has {rows} rows: set high = {rows} (or less) for '{spec.name}' "
                f"in inputs of {label}"
            )
    # Derived indices, e.g. positions arange(seq): the dynamic dim that reaches past.
    for dim in signature.dynamic_dims:
        sizes = [shapes[name][axis] for name, axis in dim.axes.items() if name in shapes]
        if sizes and max(sizes) > rows:
            return (
                f"the dynamic dim '{dim.name}' reaches {max(sizes)}, but the embedding{at} has "
                f"{rows} rows (its positions): set max = {rows} (or less) for '{dim.name}' in "
                f"dynamic_dims of {label}"
            )
    return None


# -- torch.export refused ---------------------------------------------------------------

_DIM_FIX = re.compile(r"^(\w+) = Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)$")
_CONSTANT_FIX = re.compile(r"^(\w+) = (\d+)$")


def export_failure(
    error: Exception, *, label: str, signature: ModelSignature, module: torch.nn.Module
) -> ActionError:
    text = f"{type(error).__name__}: {str(error).strip()}"
    location = user_location(error)
    fixes = suggested_fixes(str(error))
    if "Constraints violated" in text or fixes:
        return _constraint_error(error, label, signature, fixes, location)
    if "data-dependent" in text.lower() or "GuardOnDataDependent" in text:
        return ActionError(
            f"torch.export failed: the model has data-dependent control flow ({summary(error)})",
            label=label,
            location=location,
            hint="rewrite the branch with torch.cond, or make it independent of tensor values",
            cause=error,
        )
    if "pytree" in text or "not a known type" in text:
        return ActionError(
            f"torch.export failed: the model returns a type it cannot flatten ({summary(error)})",
            label=label,
            location=location,
            hint=_output_type_hint(module, label),
            cause=error,
        )
    return ActionError(
        f"torch.export failed: {summary(error)}", label=label, location=location, cause=error
    )


def _output_type_hint(module: torch.nn.Module, label: str) -> str:
    config = getattr(module, "config", None)
    if getattr(config, "use_cache", False):
        return (
            f"the model's config has use_cache = True, so it returns its key/value cache "
            f"(past_key_values): build it with use_cache=False (set model.config.use_cache = "
            f"False in the factory, or pass use_cache = False in factory_kwargs of {label})"
        )
    return (
        "return tensors, or tuples, lists and dicts of them, or register the type with "
        "torch.utils._pytree.register_dataclass / register_pytree_node"
    )


def _constraint_error(
    error: Exception,
    label: str,
    signature: ModelSignature,
    fixes: list[str],
    location: str | None,
) -> ActionError:
    """torch narrowed or fixed a dynamic dim: say which, keep torch's suggestion whole."""
    dims = {dim.name: dim for dim in signature.dynamic_dims}
    problems, hints = [], []
    for fix in fixes:
        if (found := _DIM_FIX.match(fix)) and found.group(2) in dims:
            dim = dims[found.group(2)]
            low = int(found.group(3)) if found.group(3) else dim.min
            high = int(found.group(4)) if found.group(4) else dim.max
            problems.append(
                f"the model takes '{dim.name}' only in [{low}, {high}], not the declared "
                f"[{dim.min}, {dim.max}]"
            )
            hints.append(
                f"set min = {low}, max = {high} for '{dim.name}' in dynamic_dims of {label}"
            )
        elif (found := _CONSTANT_FIX.match(fix)) and found.group(1) in dims:
            dim, value = dims[found.group(1)], int(found.group(2))
            problems.append(f"the model fixes '{dim.name}' to {value}")
            if value == 1:
                hints.append(
                    f"torch.export specializes a size of 1: give the example inputs of {label} "
                    f"a size of 2 or more for '{dim.name}', inside [{dim.min}, {dim.max}]"
                )
            else:
                hints.append(
                    f"make the model take other sizes of '{dim.name}' (no hard-coded sizes in "
                    f"view/reshape), or drop '{dim.name}' from dynamic_dims of {label}"
                )
    detail = "; ".join(problems) or first_line(str(error))
    torch_says = "; ".join(fixes)
    message = f"torch.export cannot keep the dynamic dims as declared: {detail}"
    if torch_says:
        message += f" (torch suggests: {torch_says})"
    hint = "; ".join(hints) or None
    return ActionError(message, label=label, location=location, hint=hint, cause=error)
