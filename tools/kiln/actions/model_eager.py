"""python -m kiln.actions.model_eager SPEC: a torch_model over a model_dataset, in eager
mode; its first output for every sample, to a safetensors file ("output").

Keyed on the model's source and weights and the data: a comment-only edit runs it again
and writes the same bytes, so the model_test reading them stays a cache hit."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kiln.actions import spec as action_spec
from kiln.actions.datasets import InputShape, read_arrays, run_batches, samples
from kiln.actions.model_loading import build_model, load_weights
from kiln.model_test_specs import EagerOutputsSpec


def main(spec: EagerOutputsSpec) -> None:
    from safetensors.torch import save_file

    model = spec.model
    module = build_model(model.source, model.label)
    if model.source.weights:
        load_weights(module, Path(model.source.weights), model.label)
    module.eval()
    shapes = input_shapes(spec)
    tensors, count = samples(spec.dataset, read_arrays(spec.dataset), model.label, shapes)
    outputs = run_batches(module, tensors, count, shapes[0].dims[0])
    Path(spec.output).parent.mkdir(parents=True, exist_ok=True)
    save_file({"output": outputs.contiguous()}, spec.output)


def input_shapes(spec: EagerOutputsSpec) -> list[InputShape]:
    signature = spec.model.signature
    shapes = []
    for tensor in signature.inputs:
        dims = [(n, n) for n in tensor.shape]
        for dim in signature.dynamic_dims:
            axis = dim.axes.get(tensor.name)
            if axis is not None:
                dims[axis] = (dim.min, dim.max)
        shapes.append(InputShape(tensor.name, getattr(torch, tensor.dtype), tuple(dims)))
    return shapes


if __name__ == "__main__":
    action_spec.run(main, EagerOutputsSpec, sys.argv[1:])
