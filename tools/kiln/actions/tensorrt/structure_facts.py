"""What AotiRefit's direct path needs of a program's structure: each batch norm's eps and
the weights the graph reads, read from the graph the archive holds as JSON.

`torch.export.load` gives the same two facts, but it imports torch's serializer (and
sympy) and rebuilds a graph module of meta tensors first: about 2 s of AotiRefit's 5 s
on ResNet-18, in a rebuild whose only other work is TensorRT's refit (docs/gpu.md). The
archive's `models/model.json` (torch.export's serialized schema, version 8 in torch
2.11-2.13) names every node's target and arguments and the signature's inputs, so a JSON
walk reads them in milliseconds. Where the archive is not what this reader knows (another
schema, no such record), `torch.export.load` reads it instead: the facts never depend on
which reader ran (tests/unit/trt/test_structure_facts.py).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.actions.tensorrt.refit_constants import EPS_ARG

BATCH_NORM = "_native_batch_norm_legit_no_training"
# Inference batch norms in an exported graph -> the index of their eps argument: torch
# 2.13's export keeps aten.batch_norm; a decomposed program has the other.
_BATCH_NORMS = {
    "aten.batch_norm.default": 7,
    f"aten.{BATCH_NORM}.default": EPS_ARG,
}
_SCHEMA_MAJOR = 8  # torch.export's serialized schema this reader walks
_GRAPH = "models/model.json"


@dataclass(frozen=True)
class StructureFacts:
    """What the plan needs of the program's structure (its graph, no weights)."""

    batch_norm_eps: dict[str, float]  # batch norm node -> eps
    used_weights: frozenset[str]  # the parameters and buffers the graph reads


class _Unknown(Exception):
    """The archive's graph is not in the layout this reader walks."""


def structure_facts(structure: Path) -> StructureFacts:
    try:
        return _from_json(structure)
    except _Unknown:
        return _from_program(structure)


def _decomposed_name(index: int) -> str:
    """The k-th batch norm is the k-th `_native_batch_norm_legit_no_training` of the graph
    Torch-TensorRT decomposes it into (run_decompositions names them so)."""
    return BATCH_NORM if index == 0 else f"{BATCH_NORM}_{index}"


# -- the JSON reader ------------------------------------------------------------------


def _from_json(structure: Path) -> StructureFacts:
    try:
        with zipfile.ZipFile(structure) as archive:
            names = [n for n in archive.namelist() if n.endswith("/" + _GRAPH) or n == _GRAPH]
            if len(names) != 1:
                raise _Unknown(f"{len(names)} {_GRAPH} records")
            model = json.loads(archive.read(names[0]))
        if model["schema_version"]["major"] != _SCHEMA_MAJOR:
            raise _Unknown(f"schema {model['schema_version']}")
        graph = model["graph_module"]["graph"]
        weight_of = dict(_weight_inputs(model["graph_module"]["signature"]["input_specs"]))
        read = set(_names(graph["outputs"]))
        eps: dict[str, float] = {}
        for node in graph["nodes"]:
            arguments = [item["arg"] for item in node["inputs"]]
            read.update(_names(arguments))
            at = _BATCH_NORMS.get(node["target"].removeprefix("torch.ops."))
            if at is not None and len(arguments) > at:
                value = arguments[at].get("as_float", arguments[at].get("as_int"))
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    eps[_decomposed_name(len(eps))] = float(value)
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise _Unknown(repr(error)) from error
    used = frozenset(weight for arg, weight in weight_of.items() if arg in read)
    return StructureFacts(batch_norm_eps=eps, used_weights=used)


def _weight_inputs(specs: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(placeholder name, state-dict name) of the signature's parameters and buffers."""
    for spec in specs:
        if "parameter" in spec:
            yield spec["parameter"]["arg"]["name"], spec["parameter"]["parameter_name"]
        elif "buffer" in spec:
            yield spec["buffer"]["arg"]["name"], spec["buffer"]["buffer_name"]


def _names(value: Any) -> Iterator[str]:
    """Every value name an argument refers to (tensors, lists and optionals of them):
    the graph's names are unique, so any `name` that is a placeholder's is a read of it."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "name" and isinstance(item, str):
                yield item
            else:
                yield from _names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _names(item)


# -- torch's reader -------------------------------------------------------------------


def _from_program(structure: Path) -> StructureFacts:
    import torch

    program = torch.export.load(str(structure))  # meta tensors: nothing of a value
    signature = program.graph_signature
    weight_of = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    eps: dict[str, float] = {}
    used = set()
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in weight_of and node.users:
            used.add(weight_of[node.name])
        at = _BATCH_NORMS.get(str(node.target))
        if at is not None and len(node.args) > at and isinstance(node.args[at], (int, float)):
            eps[_decomposed_name(len(eps))] = float(node.args[at])
    return StructureFacts(batch_norm_eps=eps, used_weights=frozenset(used))
