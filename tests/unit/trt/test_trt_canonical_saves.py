"""The programs TensorRT's actions save hold nothing of the process that made them.

torch_tensorrt.save re-exports the compiled module; a re-export records each node's
`from_node`, with `graph_id`, the id() of a graph of that process. Saved inside
engine.canonical_export_saves, two programs of the same model are the same bytes.
"""

from __future__ import annotations

import io
import zipfile

import pytest
import torch
from kiln.actions.tensorrt.engine import canonical_export_saves

pytestmark = pytest.mark.torch


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def _reexported() -> torch.export.ExportedProgram:
    """As torch_tensorrt.save(retrace=True) makes it: an export of a program's module."""
    torch.manual_seed(0)
    first = torch.export.export(_Mlp(), (torch.randn(3, 4),))
    return torch.export.export(first.module(), (torch.randn(3, 4),))


def _saved(program: torch.export.ExportedProgram) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    with zipfile.ZipFile(buffer) as archive:
        (model,) = [n for n in archive.namelist() if n.endswith("models/model.json")]
        return buffer.getvalue(), archive.read(model).decode()


def test_a_reexported_program_records_graph_ids_of_its_process() -> None:
    """What the fix is for: without it, the saved program names id()s."""
    first, second = _reexported(), _reexported()
    assert any("from_node" in n.meta for n in first.graph.nodes)
    assert _saved(first)[1] != _saved(second)[1]
    assert '\\"graph_id\\"' in _saved(first)[1]


def test_saved_canonically_two_programs_of_one_model_are_the_same_bytes() -> None:
    with canonical_export_saves():
        (first, first_model), (second, _) = _saved(_reexported()), _saved(_reexported())
    assert "from_node" not in first_model and "graph_id" not in first_model
    assert "stack_trace" not in first_model
    assert first == second
