"""//models:mlp_pt2's torch actions run by a kiln worker on BuildGrid: byte-identical to local."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.buildgrid_server import BuildGrid
from tests.e2e.reapi.test_grpc_execution import remote_build
from tests.kiln_workspace import Workspace
from tests.reapi_workers import reapi_workers

REPO = Path(__file__).resolve().parents[3]
MODELS = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)
aoti_package(name = "mlp_pt2", model = ":mlp")
"""


@pytest.mark.torch
def test_mlp_pt2_built_by_a_reapi_worker_is_the_bytes_built_here(
    ws: Workspace, buildgrid: BuildGrid
) -> None:
    ws.write("models/BUILD", MODELS)
    shutil.copy(REPO / "models/mlp.py", ws.root / "models/mlp.py")
    local = ws.copy("local")
    built_here = local.kiln("build", "//models:mlp_pt2")
    assert built_here.code == 0, built_here.err
    with reapi_workers(ws, buildgrid, {"a": []}):
        run = remote_build(ws, buildgrid, target="//models:mlp_pt2")
    assert run.code == 0, run.err
    summary = next(line for line in run.err.splitlines() if " actions: " in line)
    assert "remote-exec" in summary, run.err
    remote_out, local_out = (w.root / "kiln-out" / "models" for w in (ws, local))
    made = sorted(p.relative_to(local_out) for p in local_out.rglob("*") if p.is_file())
    assert Path("mlp_pt2.pt2") in made and Path("mlp_pt2.validation.json") in made
    for path in made:
        assert (remote_out / path).read_bytes() == (local_out / path).read_bytes(), path
