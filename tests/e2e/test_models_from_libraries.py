"""examples/libraries/: two timm models and a BERT, declared through the lock, packaged.

The wheels come from tools/wheelhouse.sh (a wheelhouse filled once from the
lock, checked against its hashes, kept in .wheelhouse/ or $KILN_WHEELHOUSE),
so the builds make their environments offline. One build of //models/...
serves every test of this module: about a minute of AOTInductor packaging.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples/libraries"
KILN = [sys.executable, "-m", "kiln"]
TARGETS = ("vit_pt2", "resnet_pt2", "bert_pt2")


@dataclass
class Examples:
    root: Path
    wheelhouse: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess[str]

    def build(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*KILN, "build", "//models/...", f"--pip_find_links={self.wheelhouse}", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Examples]:
    wheelhouse = Path(os.environ.get("KILN_WHEELHOUSE", REPO / ".wheelhouse"))
    subprocess.run(
        [REPO / "tools/wheelhouse.sh", EXAMPLES / "requirements_lock.txt", wheelhouse],
        check=True,
        env=dict(os.environ, KILN_PYTHON=sys.executable),
    )
    base = tmp_path_factory.mktemp("examples")
    root = base / "examples"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("kiln-out"))
    env = dict(os.environ, XDG_CACHE_HOME=str(base / "cache"), HOME=str(base))
    workspace = Examples(root, wheelhouse, env, subprocess.CompletedProcess([], 0))
    workspace.first = workspace.build()
    assert workspace.first.returncode == 0, workspace.first.stderr
    yield workspace


@pytest.mark.parametrize("name", TARGETS)
def test_each_model_is_packaged_and_matches_eager(examples: Examples, name: str) -> None:
    report = json.loads((examples.root / f"kiln-out/models/{name}.validation.json").read_text())
    assert [c["point"] for c in report["checks"]] == ["min", "opt", "max"]
    assert report["max_abs_error"] < 1e-4
    assert (examples.root / f"kiln-out/models/{name}.pt2").stat().st_size > 10_000
    assert (examples.root / f"kiln-out/models/{name}_loader/{name}.h").is_file()


def test_one_environment_per_locked_closure_made_offline(examples: Examples) -> None:
    lines = examples.first.stderr.splitlines()
    made = [line for line in lines if "making the Python environment" in line]
    assert len(made) == 2, made  # timm's closure (both timm models) and transformers'
    assert all(f"from {examples.wheelhouse}" in line for line in made)
    installed = {line.split("] ")[-1] for line in lines if line.startswith("INFO:   [")}
    assert {"timm-1.0.31", "torchvision-0.28.0", "transformers-4.57.6"} <= installed
    assert not [name for name in installed if name.startswith("torch-")]  # the toolchain's
    assert examples.first.stderr.count("INFO: Python environment ") == 2


def test_a_second_build_runs_nothing(examples: Examples) -> None:
    again = examples.build()
    assert again.returncode == 0, again.stderr
    assert "0 executed" in again.stderr
    assert "making the Python environment" not in again.stderr
