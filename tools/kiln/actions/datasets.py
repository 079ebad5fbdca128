"""A model_dataset's arrays, and how they are cut into batches the model takes.

Shared by ModelEager (the torch_model over the data) and model_test (the artifact over
it), so both see the same samples in the same batches.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from kiln.actions.errors import ActionError, summary, user_location
from kiln.model_test_specs import DatasetSpec


def read_arrays(spec: DatasetSpec) -> dict[str, torch.Tensor]:
    """Every array of the dataset, as tensors."""
    if spec.format == "npz":
        import numpy

        with numpy.load(spec.files[0]) as data:
            arrays = {name: torch.from_numpy(data[name].copy()) for name in data.files}
    elif spec.format == "safetensors":
        from safetensors.torch import load_file

        arrays = load_file(spec.files[0])
    else:
        arrays = _read_with_reader(spec)
    return arrays


def _read_with_reader(spec: DatasetSpec) -> dict[str, torch.Tensor]:
    assert spec.reader is not None
    path, _, function = spec.reader.rpartition(":")
    try:
        loaded = importlib.util.spec_from_file_location(f"kiln_reader_{Path(path).stem}", path)
        assert loaded is not None and loaded.loader is not None
        module = importlib.util.module_from_spec(loaded)
        sys.modules[loaded.name] = module  # dataclasses look their module up
        sys.path.insert(0, str(Path(path).parent))
        loaded.loader.exec_module(module)
        read = getattr(module, function)
        result = read(list(spec.files))
    except Exception as error:
        raise ActionError(
            f"the reader {spec.reader} failed: {summary(error)}",
            label=spec.label,
            location=user_location(error),
            cause=error,
        ) from error
    if not isinstance(result, dict):
        raise ActionError(
            f"the reader {spec.reader} returned {type(result).__name__}, not a dict of arrays",
            label=spec.label,
        )
    import numpy

    return {
        str(k): torch.from_numpy(numpy.asarray(v)) if not isinstance(v, torch.Tensor) else v
        for k, v in result.items()
    }


def named(spec: DatasetSpec, arrays: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in arrays:
        raise ActionError(
            f"the dataset has no array '{name}' (it has: {', '.join(sorted(arrays)) or 'none'})",
            label=spec.label,
            hint="name the arrays of the data in model_dataset's inputs and labels",
        )
    return arrays[name]


@dataclass(frozen=True)
class InputShape:
    """One model input as the batching needs it: its dtype, and each dim's [min, max]."""

    name: str
    dtype: torch.dtype
    dims: tuple[tuple[int, int], ...]  # static: (n, n)


def samples(
    spec: DatasetSpec, arrays: dict[str, torch.Tensor], model: str, shapes: Sequence[InputShape]
) -> tuple[list[torch.Tensor], int]:
    """The input arrays, checked against the model's inputs; the number of samples."""
    if len(spec.inputs) != len(shapes):
        raise ActionError(
            f"the dataset names {len(spec.inputs)} inputs ({', '.join(spec.inputs)}), "
            f"{model} takes {len(shapes)} ({', '.join(s.name for s in shapes)})",
            label=spec.label,
            hint="list the model's inputs, in order, in model_dataset's inputs",
        )
    tensors = [named(spec, arrays, name) for name in spec.inputs]
    count = tensors[0].shape[0] if tensors[0].dim() else 0
    for name, tensor, shape in zip(spec.inputs, tensors, shapes, strict=True):
        fits = (
            tensor.dtype == shape.dtype
            and tensor.dim() == len(shape.dims)
            and tensor.shape[0] == count
            and all(
                lo <= n <= hi for n, (lo, hi) in zip(tensor.shape[1:], shape.dims[1:], strict=True)
            )
        )
        if not fits:
            raise ActionError(
                f"the dataset does not fit {model}'s inputs: '{name}' is "
                f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}, "
                f"the model's '{shape.name}' takes {str(shape.dtype).removeprefix('torch.')} "
                f"[samples, {', '.join(_dim(d) for d in shape.dims[1:])}]",
                label=spec.label,
                hint="make the arrays fit (the first axis counts samples), or test another model",
            )
    if count == 0:
        raise ActionError("the dataset holds no samples", label=spec.label)
    return tensors, count


def _dim(bounds: tuple[int, int]) -> str:
    low, high = bounds
    return str(low) if low == high else f"{low}..{high}"


def batches(
    tensors: list[torch.Tensor], count: int, first: tuple[int, int]
) -> Iterator[list[torch.Tensor]]:
    """Cut the samples along axis 0 into batches the model's first dim takes: `first` is its
    [min, max] (static: [n, n]); samples left over a static batch are an error."""
    low, high = first
    if low == high and count % low:
        raise ActionError(
            f"the model takes batches of exactly {low} samples; the dataset has {count}, "
            f"not a multiple of {low}",
            hint="give a dynamic batch dim (dynamic_dims) or a dataset of whole batches",
        )
    step = high
    for start in range(0, count, step):
        batch = [t[start : start + step] for t in tensors]
        if batch[0].shape[0] < low:  # the last one, too small for a dynamic dim's min
            pad = low - batch[0].shape[0]
            batch = [torch.cat([b, b[-1:].expand(pad, *b.shape[1:])]) for b in batch]
        yield batch


def first_output(value: object) -> torch.Tensor:
    """The first tensor of what a model returned (a tensor, a tuple, a dict)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_output(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        for item in value.values():
            return first_output(item)
    raise ActionError(f"the model returned {type(value).__name__}, with no tensor to measure")


def run_batches(
    call: object, tensors: list[torch.Tensor], count: int, first: tuple[int, int]
) -> torch.Tensor:
    """Every sample's first output, in order (padding dropped)."""
    outputs = []
    done = 0
    with torch.no_grad():
        for batch in batches(tensors, count, first):
            out = first_output(call(*batch))  # type: ignore[operator]
            take = min(batch[0].shape[0], count - done)
            outputs.append(out[:take].detach().cpu())
            done += take
    return torch.cat(outputs)
