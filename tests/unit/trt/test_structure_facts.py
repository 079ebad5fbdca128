"""What AotiRefit reads of a structure (kiln.actions.tensorrt.structure_facts): each batch
norm's eps, named as in the graph Torch-TensorRT compiles, and the weights the graph reads.
Read from the archive's graph JSON, and the same facts as torch.export.load gives."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from kiln.actions import weights_split
from kiln.actions.tensorrt import structure_facts as facts_module
from kiln.actions.tensorrt.structure_facts import StructureFacts, structure_facts

pytestmark = pytest.mark.torch


class _ConvBn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4, eps=1e-3)
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class _Residual(torch.nn.Module):
    """Two batch norms of different eps, a skip connection, and a buffer returned as is."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(4, eps=1e-5)
        self.bn2 = torch.nn.BatchNorm2d(4, eps=2e-3)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bn2(self.conv(self.bn1(x))) + x, self.scale


def _structure(module: torch.nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    program = torch.export.export(module.eval(), (torch.randn(*shape),))
    _, ties = weights_split.split(program)
    weights_split.save_structure(program, path, ties)
    return path


def test_the_structure_gives_each_batch_norms_eps_and_the_weights_the_graph_reads(
    tmp_path: Path,
) -> None:
    facts = structure_facts(_structure(_ConvBn(), (1, 3, 8, 8), tmp_path / "s.pt2"))
    # named as in the decomposed graph Torch-TensorRT compiles (export keeps batch_norm)
    assert facts.batch_norm_eps == {"_native_batch_norm_legit_no_training": 1e-3}
    # num_batches_tracked and the unused layer are no weight the program reads
    assert facts.used_weights == {
        "conv.weight",
        "conv.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
    }


@pytest.mark.parametrize("model", ["conv_bn", "residual"])
def test_the_json_reader_and_torch_export_load_give_the_same_facts(
    tmp_path: Path, model: str
) -> None:
    module, shape = {
        "conv_bn": (_ConvBn(), (1, 3, 8, 8)),
        "residual": (_Residual(), (2, 4, 8, 8)),
    }[model]
    path = _structure(module, shape, tmp_path / "s.pt2")
    from_json = facts_module._from_json(path)
    assert from_json == facts_module._from_program(path)
    if model == "residual":
        assert from_json.batch_norm_eps == {
            "_native_batch_norm_legit_no_training": 1e-5,
            "_native_batch_norm_legit_no_training_1": 2e-3,
        }
        assert "scale" in from_json.used_weights  # read by the output alone


def test_a_decomposed_program_gives_its_batch_norms_by_their_own_op(tmp_path: Path) -> None:
    program = torch.export.export(_Residual().eval(), (torch.randn(2, 4, 8, 8),))
    program = program.run_decompositions()
    torch.export.save(program, tmp_path / "d.pt2")
    found = facts_module._from_json(tmp_path / "d.pt2")
    assert found == facts_module._from_program(tmp_path / "d.pt2")
    assert sorted(found.batch_norm_eps.values()) == [1e-5, 2e-3]


def test_a_graph_of_another_schema_is_read_by_torch_export_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _structure(_ConvBn(), (1, 3, 8, 8), tmp_path / "s.pt2")
    newer = tmp_path / "newer.pt2"
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(newer, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename.endswith("models/model.json"):
                model = json.loads(data)
                model["schema_version"]["major"] += 1
                data = json.dumps(model).encode()
            new.writestr(info, data)
    read = []

    def from_program(structure: Path) -> StructureFacts:
        read.append(structure)
        return StructureFacts(batch_norm_eps={}, used_weights=frozenset())

    monkeypatch.setattr(facts_module, "_from_program", from_program)
    structure_facts(newer)
    assert read == [newer]
    structure_facts(path)  # the schema it knows: no torch.export.load
    assert read == [newer]
