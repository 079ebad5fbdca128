"""TorchExport: torch.export.export the model, save the program in a canonical form,
and record eager's outputs at every shape point (the goldens validation compares with).

The saved program leaves out each node's `stack_trace` metadata: it holds
the absolute source path and line numbers, so a comment-only edit would
change the bytes. Without it, an edit that leaves the graph alone (comments,
formatting, a renamed local) yields a byte-identical program, and the
expensive packaging action that reads it is a cache hit: early cutoff, with
no special case in the executor.

The goldens (`<name>.golden.safetensors`) are the same kind of cutoff point for
validation: eager's outputs on deterministic inputs at the min/opt/max shapes
(ModelSignature.shape_points()), computed on one intra-op thread so that their
bytes depend on the model and its inputs, not on how many cores the builder has.
An edit that leaves the model's arithmetic alone leaves them byte-identical, and
validation, which reads only them and the package, is a cache hit too.

Failures are one paragraph each (kiln.actions.model_traps): the model fails on
its example inputs, torch.export refuses it, or the model fails at a shape point.

With the spec's `weights` set (aoti_package's inductor backend) the program is
saved as its structure, placeholders in place of weights, and the weights go to
their own file (kiln.actions.weights_split): then a change of weights alone leaves
the program's bytes, and so the compile, untouched too.

It also records what loading the program imports (`<name>.needs.json`,
kiln.actions.program_needs): the actions that load it are keyed on that, not on
every package of the model's environment.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from kiln.action_specs import ExportSpec, GoldenOutput, GoldenOutputs, GoldenPoint, ModelSpec
from kiln.actions import program_needs
from kiln.actions import spec as action_spec
from kiln.actions.model_loading import build_model, dynamic_shapes, example_inputs
from kiln.actions.model_traps import eager_failure, export_failure

# The seed of the inputs at the shape points (the example inputs use 0).
GOLDEN_SEED = 1


def export(
    module: torch.nn.Module, model: ModelSpec, args: tuple[torch.Tensor, ...]
) -> torch.export.ExportedProgram:
    signature = model.signature
    try:
        with torch.no_grad():
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes(signature))
    except Exception as error:
        raise export_failure(
            error, label=model.label, signature=signature, module=module
        ) from error


def run_eager(
    module: torch.nn.Module,
    model: ModelSpec,
    args: tuple[torch.Tensor, ...],
    point: str,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> Any:
    try:
        with torch.no_grad():
            return module(*args)
    except Exception as error:
        raise eager_failure(
            error,
            label=model.label,
            signature=model.signature,
            args=args,
            point=point,
            shapes=shapes,
        ) from error


def canonicalize(program: torch.export.ExportedProgram) -> None:
    """Drop metadata that records where the source was, not what it computes."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            node.meta.pop("stack_trace", None)


def flat_outputs(value: Any) -> list[tuple[str, torch.Tensor]]:
    """(pytree path, tensor) of every tensor in a model's output, in the order the
    exported program returns them ("" for a model that returns one tensor)."""
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten_with_path(value)
    return [(pytree.keystr(path), leaf) for path, leaf in leaves if isinstance(leaf, torch.Tensor)]


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def golden_outputs(
    module: torch.nn.Module, model: ModelSpec, device: torch.device
) -> tuple[GoldenOutputs, dict[str, torch.Tensor]]:
    """Eager's outputs at every shape point: the record and the tensors by name."""
    tensors: dict[str, torch.Tensor] = {}
    points = []
    signature = model.signature
    with one_thread():
        for point, shapes in signature.shape_points():
            args = tuple(
                t.to(device) for t in example_inputs(signature.inputs, shapes, seed=GOLDEN_SEED)
            )
            outputs = []
            for i, (path, tensor) in enumerate(
                flat_outputs(run_eager(module, model, args, point, shapes))
            ):
                name = f"{point}/{i}"
                # Own, contiguous CPU copies: safetensors refuses shared or strided storage.
                tensors[name] = tensor.detach().to("cpu").contiguous().clone()
                outputs.append(
                    GoldenOutput(
                        path=path,
                        tensor=name,
                        shape=tuple(tensor.shape),
                        dtype=str(tensor.dtype).removeprefix("torch."),
                    )
                )
            points.append(GoldenPoint(point=point, shapes=shapes, outputs=tuple(outputs)))
    record = GoldenOutputs(model=model.label, input_seed=GOLDEN_SEED, points=tuple(points))
    return record, tensors


def write_goldens(path: Path, record: GoldenOutputs, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"kiln": record.to_json()})


def export_model(
    model: ModelSpec, device: torch.device
) -> tuple[torch.nn.Module, torch.export.ExportedProgram]:
    """Build the module and export it from its example inputs."""
    module = build_model(model.source, model.label).to(device)
    args = tuple(t.to(device) for t in example_inputs(model.signature.inputs))
    # Eager first: a model that cannot take its declared inputs fails here, in its own
    # code, not deep inside torch.export's tracing.
    run_eager(module, model, args, "example")
    return module, export(module, model, args)


def main(spec: ExportSpec) -> None:
    model = spec.model
    device = torch.device(spec.device)
    module, program = export_model(model, device)
    canonicalize(program)
    program_needs.write(Path(spec.needs), program_needs.needs_of(program))
    output = Path(spec.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # The goldens first: eager's outputs with the real weights, before the split takes
    # them out of the program.
    if spec.goldens is not None:
        write_goldens(Path(spec.goldens), *golden_outputs(module, model, device))
    if spec.weights is None:
        torch.export.save(program, output)
        return
    from kiln.actions import weights_split

    weights, ties = weights_split.split(program)
    weights_split.save(weights, Path(spec.weights))
    weights_split.save_structure(program, output, ties)


if __name__ == "__main__":
    action_spec.run(main, ExportSpec, sys.argv[1:], quiet=True)
