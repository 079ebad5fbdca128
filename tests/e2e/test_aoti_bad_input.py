"""Bad model input: a short error naming the target and the cause, exit 1, nothing cached."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.test_aoti_package import ModelWorkspace, make_workspace

pytestmark = pytest.mark.torch

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        {body}


def build():
    {factory}
"""


def workspace(
    tmp_path: Path,
    *,
    body: str = "return self.fc(x)",
    factory: str = "return Net()",
    model_attrs: str = "",
    package_attrs: str = "",
    inputs: str = '[{"name": "x", "shape": [4, 4]}]',
    dims: str = '[{"name": "batch", "min": 1, "max": 16, "axes": {"x": 0}}]',
) -> ModelWorkspace:
    build = f"""
torch_model(
    name = "net",
    src = "net.py",
    factory = "net:build",
    inputs = {inputs},
    dynamic_dims = {dims},{model_attrs}
)

aoti_package(name = "net_pt2", model = ":net"{package_attrs})
"""
    ws = make_workspace(tmp_path / "ws", tmp_path / "cache", build)
    (ws.root / "models/net.py").write_text(MODEL.format(body=body, factory=factory))
    return ws


def fails_twice(ws: ModelWorkspace, expected: str) -> str:
    """Build twice: both fail with `expected` in the output and the failing action re-runs."""
    first = ws.build("//models:net_pt2")
    assert first.code == 1, first.err
    assert expected in first.err, first.err
    assert "Traceback" not in first.err
    second = ws.build("//models:net_pt2")
    assert second.code == 1 and expected in second.err
    assert "failed" in second.actions("TorchExport")  # ran again: a failure is never cached
    return first.err


def test_factory_that_raises(tmp_path: Path) -> None:
    ws = workspace(tmp_path, factory='raise RuntimeError("checkpoint not found")')
    err = fails_twice(
        ws,
        "kiln-action-error: models/net.py:16: //models:net: the factory net:build raised "
        "RuntimeError: checkpoint not found",
    )
    assert "ERROR: models/BUILD:10:1: TorchExport //models:net_pt2 failed" in err


def test_model_with_data_dependent_control_flow(tmp_path: Path) -> None:
    body = "if x.sum() > 0:\n            return self.fc(x)\n        return self.fc(-x)"
    ws = workspace(tmp_path, body=body)
    err = fails_twice(ws, "torch.export failed: the model has data-dependent control flow")
    assert "torch.cond" in err


def test_weights_with_missing_and_unexpected_keys(tmp_path: Path) -> None:
    ws = workspace(tmp_path, model_attrs='\n    weights = "net.pt",')
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; torch.save({'fc.weight': torch.zeros(2, 4), 'extra': torch.zeros(1)},"
            " 'models/net.pt')",
        ],
        cwd=ws.root,
        check=True,
    )
    fails_twice(ws, "do not match the model (missing keys: fc.bias; unexpected keys: extra)")


@pytest.mark.parametrize(
    ("dims", "inputs", "expected"),
    [
        (
            '[{"name": "batch", "min": 10, "max": 2, "axes": {"x": 0}}]',
            None,
            "dynamic dim 'batch': min 10 > max 2",
        ),
        (
            '[{"name": "batch", "min": 1, "max": 16, "opt": 32, "axes": {"x": 0}}]',
            None,
            "dynamic dim 'batch': opt 32 is outside [1, 16]",
        ),
        (
            None,
            '[{"name": "x", "shape": [1, 4]}]',
            "the example input 'x' has size 1 on axis 0, the dynamic dim 'batch'",
        ),
        (None, '[{"name": "x", "shape": [4, 4], "dtype": "float33"}]', "float33"),
    ],
    ids=["min_above_max", "opt_outside_range", "batch_one_example", "unknown_dtype"],
)
def test_bad_model_attributes_fail_at_loading(
    tmp_path: Path, dims: str | None, inputs: str | None, expected: str
) -> None:
    kwargs = {k: v for k, v in (("dims", dims), ("inputs", inputs)) if v is not None}
    ws = workspace(tmp_path, **kwargs)
    run = ws.build("//models:net_pt2")
    assert run.code == 1
    assert "ERROR: models/BUILD:2:1: //models:net: " in run.err
    assert expected in run.err
    assert "Traceback" not in run.err
    assert not run.events or not any(e.get("type") == "action_finished" for e in run.events)


def test_tensorrt_backend_without_torch_tensorrt(tmp_path: Path) -> None:
    ws = workspace(tmp_path, package_attrs=', device = "cuda", backend = "tensorrt"')
    run = ws.build("//models:net_pt2")
    assert run.code == 1
    assert (
        "ERROR: models/BUILD:10:1: //models:net_pt2: backend = 'tensorrt' needs torch_tensorrt"
        in run.err
    )
    assert "'trt' extra" in run.err


def test_error_text_is_short_and_names_the_target(tmp_path: Path) -> None:
    ws = workspace(tmp_path, factory='raise ValueError("bad")')
    run = ws.build("//models:net_pt2")
    lines = [line for line in run.err.splitlines() if line.startswith(("ERROR", "kiln-action"))]
    assert lines[0].startswith("ERROR: models/BUILD:10:1: TorchExport //models:net_pt2 failed")
    assert textwrap.shorten(lines[1], 200).startswith(
        "kiln-action-error: models/net.py:16: //models:net: the factory net:build"
    )


def test_cuda_package_on_a_machine_without_gpu(tmp_path: Path) -> None:
    ws = workspace(tmp_path, package_attrs=', device = "cuda"')
    run = ws.build("//models:net_pt2", "--gpus=0")
    assert run.code == 1
    assert "TorchExport //models:net_pt2 needs 1 GPU(s), but 0 are available" in run.err
    assert "Traceback" not in run.err
