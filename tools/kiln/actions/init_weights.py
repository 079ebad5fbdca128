"""ModelWeights: build the model with a seeded generator and save its state dict."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kiln.action_specs import WeightsSpec
from kiln.actions import spec as action_spec
from kiln.actions.model_loading import build_model


def main(spec: WeightsSpec) -> None:
    model = build_model(spec.source)
    # Contiguous, detached copies: safetensors refuses shared or strided storage.
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    output = Path(spec.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(output))
    else:
        torch.save(state, output)


if __name__ == "__main__":
    action_spec.run(main, WeightsSpec, sys.argv[1:], quiet=True)
