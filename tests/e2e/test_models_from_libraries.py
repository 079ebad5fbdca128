"""examples/libraries/: two timm models and a BERT, declared through the lock, packaged.

One kiln build of //models/... (the session's, tests/e2e/library_examples.py: about a
minute of AOTInductor packaging, offline from the wheelhouse) serves every test here.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.library_examples import LibraryExamples as Examples

pytestmark = pytest.mark.torch

TARGETS = ("vit_pt2", "resnet_pt2", "bert_pt2")


@pytest.fixture
def examples(library_examples: Examples) -> Examples:
    return library_examples


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
