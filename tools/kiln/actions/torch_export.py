"""TorchExport: torch.export.export the model, save the program in a canonical form.

The saved program leaves out each node's `stack_trace` metadata: it holds
the absolute source path and line numbers, so a comment-only edit would
change the bytes. Without it, an edit that leaves the graph alone (comments,
formatting, a renamed local) yields a byte-identical program, and the
expensive packaging action that reads it is a cache hit: early cutoff, with
no special case in the executor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kiln.action_specs import Device, ExportSpec, ModelSignature, ModelSpec
from kiln.actions import spec as action_spec
from kiln.actions.model_loading import build_model, dynamic_shapes, example_inputs
from kiln.actions.spec import ActionFailure


def export(model: ModelSpec, device: Device) -> torch.export.ExportedProgram:
    where = torch.device(device)
    module = build_model(model.source).to(where)
    signature = model.signature
    args = tuple(t.to(where) for t in example_inputs(signature.inputs))
    try:
        with torch.no_grad():
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes(signature))
    except Exception as error:
        raise ActionFailure(_explain_export_error(error, signature)) from error


def _explain_export_error(error: Exception, signature: ModelSignature) -> str:
    text = f"{type(error).__name__}: {str(error).strip()}"
    first = text.splitlines()[0] if text else type(error).__name__
    shapes = {spec.name: spec.shape for spec in signature.inputs}
    for dim in signature.dynamic_dims:
        for input_name, axis in dim.axes.items():
            shape = list(shapes[input_name])
            if shape[axis] == 1 and dim.max > 1:
                return (
                    f"torch.export failed: {first}\n"
                    f"The example input '{input_name}' has size 1 on axis {axis}, which "
                    f"torch.export specializes to a constant, so the dynamic dimension "
                    f"'{dim.name}' cannot vary. Export from an example of size 2 or more "
                    f"inside [{dim.min}, {dim.max}] (e.g. shape {_with(shape, axis, 2)})."
                )
    if "data-dependent" in text.lower() or "GuardOnDataDependent" in text:
        return (
            f"torch.export failed: the model has data-dependent control flow.\n{first}\n"
            "Rewrite the branch with torch.cond, or make it independent of tensor values."
        )
    return f"torch.export failed: {first}"


def _with(shape: list[int], axis: int, value: int) -> list[int]:
    out = list(shape)
    out[axis] = value
    return out


def canonicalize(program: torch.export.ExportedProgram) -> None:
    """Drop metadata that records where the source was, not what it computes."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            node.meta.pop("stack_trace", None)


def main(spec: ExportSpec) -> None:
    program = export(spec.model, spec.device)
    canonicalize(program)
    output = Path(spec.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, output)


if __name__ == "__main__":
    action_spec.run(main, ExportSpec, sys.argv[1:])
