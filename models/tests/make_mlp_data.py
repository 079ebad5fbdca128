"""Writes mlp_data.safetensors, the mlp's test set: `python models/tests/make_mlp_data.py`.

100 inputs drawn from a seeded generator; their labels are the classes the checked-in
mlp (models/mlp.safetensors) gives them, with every tenth moved to the next class, as
label noise would: a correct package scores top1 0.9, one that computes something else
far less (the commonest class alone is 0.61). Run it again after retraining the mlp;
the same weights give the same bytes (tests/e2e/test_example_tests.py checks that).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file
from safetensors.torch import load_file

MODELS = Path(__file__).resolve().parents[1]
SAMPLES = 100


def make(out: Path) -> None:
    sys.path.insert(0, str(MODELS))
    from mlp import build  # models/mlp.py

    model = build()
    model.load_state_dict(load_file(MODELS / "mlp.safetensors"))
    model.eval()
    x = np.random.default_rng(2026).standard_normal((SAMPLES, 10)).astype(np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).argmax(1).numpy().astype(np.int64)
    y[::10] = (y[::10] + 1) % 4
    save_file({"x": x, "y": y}, str(out))


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else MODELS / "tests/mlp_data.safetensors")
