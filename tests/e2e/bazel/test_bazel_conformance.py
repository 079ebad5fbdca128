"""`kiln build` and `bazel build` of the same BUILD files give the same bytes.

The session's twin builds (conftest.py) of //models:mlp_pt2 and //models:resnet_pt2
are compared file by file: every artifact byte for byte, every spec once Bazel's
output root (bazel-out/<cfg>/bin) is read as kiln's (kiln-out), the one mapping
kiln.bazel.paths makes. Bazel's only extra files are its planning action's record
and report, and the runfiles header of each `<name>_cc`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from kiln.bazel.paths import as_kiln

from tests.e2e.bazel.conftest import Twins

pytestmark = pytest.mark.torch

MODELS = ("mlp_pt2", "resnet_pt2")
ARTIFACTS = (
    "{name}.pt2",
    "{name}.structure.pt2",
    "{name}.weights.safetensors",
    "{name}.program.pt2",
    "{name}.layout.json",
    "{name}.golden.safetensors",
    "{name}.validation.json",
    "{name}_loader.py",
    "{name}_loader/{name}.h",
    "{name}_loader/{name}.cpp",
    "{name}_loader/{name}Config.cmake",
    "{name}_loader/{name}.BUILD.bazel",
)
SPECS = (
    "{name}.export.json",
    "{name}.compile.json",
    "{name}.join.json",
    "{name}.validate.json",
)
BAZEL_ONLY = ("{name}.kiln_target.json", "{name}.kiln_plan.json", "{name}_runfiles.h")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", MODELS)
def test_artifacts_are_byte_identical(twins: Twins, name: str) -> None:
    for pattern in ARTIFACTS:
        relative = f"models/{pattern.format(name=name)}"
        kiln, bazel = twins.kiln_out / relative, twins.bazel_bin / relative
        assert _digest(kiln) == _digest(bazel), f"{relative} differs"


def test_generated_weights_are_byte_identical(twins: Twins) -> None:
    relative = "models/resnet18.safetensors"
    assert _digest(twins.kiln_out / relative) == _digest(twins.bazel_bin / relative)
    spec = "models/resnet_weights.weights.json"
    assert as_kiln((twins.bazel_bin / spec).read_text()) == (twins.kiln_out / spec).read_text()


@pytest.mark.parametrize("name", MODELS)
def test_specs_are_identical_but_for_the_output_root(twins: Twins, name: str) -> None:
    for pattern in SPECS:
        relative = f"models/{pattern.format(name=name)}"
        kiln = (twins.kiln_out / relative).read_text()
        bazel = (twins.bazel_bin / relative).read_text()
        assert "bazel-out/k8-fastbuild/bin/models/" in bazel  # the roots did differ
        assert as_kiln(bazel) == kiln, f"{relative} differs"


def test_bazel_makes_what_kiln_makes_and_only_its_own_extras(twins: Twins) -> None:
    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    kiln = files(twins.kiln_out / "models")
    bazel = files(twins.bazel_bin / "models")
    assert kiln <= bazel
    extras = {p.format(name=n) for n in (*MODELS, "mlp", "resnet") for p in BAZEL_ONLY}
    extras |= {p.format(name="resnet_weights") for p in BAZEL_ONLY}
    assert bazel - kiln <= extras
    assert "mlp_pt2.kiln_plan.json" in bazel - kiln


def test_the_plan_report_holds_the_actions_kiln_ran(twins: Twins) -> None:
    report = json.loads((twins.bazel_bin / "models/mlp_pt2.kiln_plan.json").read_text())
    actions = report["graph"]["actions"]
    assert [a["mnemonic"] for a in actions] == [
        "TorchExport",
        "AotiCompile",
        "AotiJoin",
        "AotiValidate",
        "AotiManifest",
    ]
    assert actions[1]["argv"] == [
        "{python}",
        "-m",
        "kiln.actions.aoti_compile",
        "bazel-out/k8-fastbuild/bin/models/mlp_pt2.compile.json",
    ]
    # AotiCompile reads the program's structure and its spec, not the model's source nor
    # its weights: a comment-only edit of mlp.py re-runs the export alone, and retrained
    # weights the export, the join and validation, under Bazel too. The export's record
    # of what loading the program imports stands in for the locked packages.
    assert sorted(actions[1]["inputs"]) == [
        "bazel-out/k8-fastbuild/bin/models/mlp_pt2.compile.json",
        "bazel-out/k8-fastbuild/bin/models/mlp_pt2.needs.json",
        "bazel-out/k8-fastbuild/bin/models/mlp_pt2.structure.pt2",
    ]


def test_every_action_ran_once_in_a_sandbox(twins: Twins) -> None:
    """Per model: the planning action and kiln's actions (the weights for resnet)."""
    plans = 4  # mlp, mlp_pt2, resnet, resnet_pt2; resnet_weights below
    torch = 5 + 5 + 1  # export, compile, join, validate, manifest each; resnet's weights
    assert twins.built.processes("processwrapper-sandbox") == plans + 1 + torch
