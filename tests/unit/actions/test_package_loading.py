"""kiln.actions.package_loading.fill: a weights file into a loaded package, checked, as
AotiValidate loads a `weights = "separate"` package.

The loader here is a stand-in with torch 2.11's signature of
AOTIModelPackageLoader.load_constants (the GPU machine's torch): a call with 2.13's
fifth argument failed every separate-weights CUDA package there. The real loader on
this machine's torch is exercised by the e2e tests of separate weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.torch


class _Loader211:
    """AOTIModelPackageLoader's two methods fill uses, with torch 2.11's signatures."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.loaded: dict[str, Any] = {}

    def get_metadata(self) -> dict[str, str]:
        return {
            "AOTI_DEVICE_KEY": self.device,
            "kiln.weights": json.dumps({"w": ["float32", [2, 3], [1, 2]]}),
        }

    def load_constants(
        self,
        constants_map: dict[str, Any],
        use_inactive: bool,
        check_full_update: bool,
        user_managed: bool = False,
    ) -> None:
        assert (use_inactive, check_full_update, user_managed) == (False, True, False)
        self.loaded = constants_map


def _weights_file(tmp_path: Path) -> str:
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, str(path))
    return str(path)


def test_weights_go_in_with_the_arguments_every_supported_torch_takes(tmp_path: Path) -> None:
    from kiln.actions.package_loading import fill

    loader = _Loader211("cpu")
    fill(loader, _weights_file(tmp_path))
    (tensor,) = loader.loaded.values()
    assert tensor.stride() == (1, 2)  # the strides the program was compiled for
    assert tensor.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_weights_go_onto_the_packages_device(tmp_path: Path) -> None:
    """torch 2.13 refuses a CPU tensor for a CUDA package's constant ('meta' stands in
    for 'cuda' on a machine without one)."""
    from kiln.actions.package_loading import fill

    loader = _Loader211("meta")
    fill(loader, _weights_file(tmp_path))
    assert loader.loaded["w"].device.type == "meta"
