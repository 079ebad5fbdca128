"""aoti_package on a CUDA GPU: the inductor and the Torch-TensorRT backends, built for real.

Marked `gpu`, skipped without one (CI has none). Run on the GPU machine with
tools/gpu_check.sh; docs/gpu.md records what ran there. On that image Python
loading of any .pt2 needs the system libstdc++ preloaded (torch-facts.md), so
the tests pass KILN_TEST_ACTION_ENV (e.g. LD_PRELOAD=...) as --action_env.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kiln.exec.host import gpu_count
from kiln.machine import distributions

from tests.e2e.test_aoti_package import MLP_BUILD, make_workspace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(gpu_count() == 0, reason="needs a CUDA GPU (none found by nvidia-smi)"),
]

CUDA_BUILD = (
    MLP_BUILD
    + """
aoti_package(name = "mlp_cuda", model = ":mlp", device = "cuda")
# TensorRT picks its own kernels (TF32 among them): 1.7e-4 was seen at batch 1 on an H200.
aoti_package(name = "mlp_trt_pt2", model = ":mlp", device = "cuda", backend = "tensorrt",
             rtol = 1e-3, atol = 1e-3)
"""
)


def _flags() -> list[str]:
    extra = os.environ.get("KILN_TEST_ACTION_ENV")
    return [f"--action_env={extra}"] if extra else []


@pytest.fixture(scope="module")
def gpu_ws(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("gpu")
    return make_workspace(base / "ws", base / "cache", CUDA_BUILD)


def test_cuda_inductor_package_builds_and_validates(gpu_ws) -> None:  # type: ignore[no-untyped-def]
    run = gpu_ws.build("//models:mlp_cuda", *_flags())
    assert run.code == 0, run.err
    report = json.loads((gpu_ws.root / "kiln-out/models/mlp_cuda.validation.json").read_text())
    assert report["max_abs_error"] < 1e-4
    print("cuda/inductor max abs error", report["max_abs_error"])


@pytest.mark.skipif(
    not {"torch_tensorrt", "torch_tensorrt_rtx"} & dict(distributions()).keys(),
    reason="needs torch_tensorrt (or the TensorRT-RTX flavour)",
)
def test_cuda_tensorrt_package_builds_and_validates(gpu_ws) -> None:  # type: ignore[no-untyped-def]
    run = gpu_ws.build("//models:mlp_trt_pt2", *_flags(), "--action_timeout=540")
    assert run.code == 0, run.err
    report = json.loads((gpu_ws.root / "kiln-out/models/mlp_trt_pt2.validation.json").read_text())
    assert report["max_abs_error"] < 1e-3
    print("cuda/tensorrt max abs error", report["max_abs_error"])
    assert Path(gpu_ws.root / "kiln-out/models/mlp_trt_pt2_loader").is_dir()
