"""The tiny model of the Torch-TensorRT contract tests: its source, its torch_model,
eager's weights, and an execroot holding it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from kiln.rule_api import DynamicDim, ModelSource, TensorSpec
from kiln.rules.model.torch_model import TorchModelInfo

from tests.model_fixtures import model_info

TINY_SOURCE = """\
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def build():
    return Tiny()
"""

_BASE = model_info(
    "//models:tiny",
    "models/trt_refit_tiny.py",
    "trt_refit_tiny:build",
    (TensorSpec(name="x", shape=(8, 10), dtype="float32"),),
    (DynamicDim(name="batch", min=1, max=64, axes={"x": 0}),),
)
# Seeded init (no weights file): the values the real weights are checked against.
TINY = TorchModelInfo(
    _BASE.spec.model_copy(
        update={"source": ModelSource(**{**_BASE.spec.source.model_dump(), "seed": 5})}
    ),
    _BASE.src,
    (),
    None,
    (),
)


def eager_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(5)
    sys.path.insert(0, "models")
    import trt_refit_tiny

    return {k: v.detach() for k, v in trt_refit_tiny.build().state_dict().items()}


@contextlib.contextmanager
def model_execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str) -> Iterator[Path]:
    """An execroot-like folder holding TINY_SOURCE as models/<module>.py, as the
    actions' cwd, with its own TMPDIR and torch temp directory."""
    root = tmp_path / "execroot"
    (root / "models").mkdir(parents=True)
    (root / "models" / f"{module}.py").write_text(TINY_SOURCE)
    (root / ".tmp").mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("TMPDIR", str(root / ".tmp"))
    monkeypatch.setenv("KILN_TORCH_TMP", str(tmp_path / "torch-tmp"))
    path = list(sys.path)
    yield root
    sys.path[:] = path  # build_model put the model's folder first
    sys.modules.pop(module, None)
