"""Bazel 4.2.3 and kiln on one BuildGrid: Bazel's --remote_executor=grpc:// build of
//models:mlp_pt2, run by a kiln worker, gives the bytes kiln builds from the same BUILD files.

Bazel's actions carry no kiln task record: the worker runs their Commands as they say
(reapi/command_runner.py), as a farm's plain worker would. Bazel's server is shut down
when the test ends; the worker and BuildGrid are stopped by PID.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bazel_workspace import Bazel, copy_repository, ensure_bazel
from tests.buildgrid_server import BuildGrid
from tests.reapi_workers import workers_in

ARTIFACTS = (
    "mlp_pt2.pt2",
    "mlp_pt2.program.pt2",
    "mlp_pt2.weights.safetensors",
    "mlp_pt2.validation.json",
    "mlp_pt2_loader.py",
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.torch
def test_bazel_builds_mlp_pt2_on_buildgrid_with_kilns_bytes(
    tmp_path: Path, buildgrid: BuildGrid
) -> None:
    ensure_bazel()
    root = copy_repository(tmp_path / "kiln")
    kiln = subprocess.run(
        [sys.executable, "-m", "kiln", "--nohome_rc", "build", "//models:mlp_pt2"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert kiln.returncode == 0, kiln.stderr[-4000:]
    bazel = Bazel.at(root, tmp_path / "bazel-root", tmp_path / "bazel-home")
    try:
        with workers_in(root, dict(os.environ), buildgrid, {"a": []}):
            built = bazel.build(
                f"--remote_executor={buildgrid.address}",
                "--spawn_strategy=remote",
                "--genrule_strategy=remote",
                "//models:mlp_pt2",
            )
        assert built.code == 0, built.err[-6000:]
        assert built.processes("remote") >= 3, built.err[-3000:]  # the torch actions
        out = bazel.bin / "models"
    finally:
        bazel.shutdown()
    for name in ARTIFACTS:
        assert _digest(out / name) == _digest(root / "kiln-out/models" / name), name
    log = (root.parent / "worker-a.log").read_text()
    assert log.count(": finished (exit code 0)") >= 3, log
