"""The planning action of a Bazel target (python -m kiln.bazel.plan), without Bazel.

The record is what rules/private/kiln_rule.bzl writes for //models:mlp_pt2 (checked
against real Bazel in tests/e2e/bazel/); here it is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kiln.bazel import plan as planner
from kiln.bazel.paths import as_kiln
from kiln.bazel.request import BazelPlan, PlanTarget
from kiln.host_facts import HostFacts

from tests.kiln_workspace import MakeWorkspace

ROOT = "bazel-out/k8-fastbuild/bin"
MLP = {
    "name": "mlp",
    "src": "//models:mlp.py",
    "factory": "mlp:build",
    "weights": "//models:mlp.safetensors",
    "inputs": [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    "dynamic_dims": [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
}
FILES = {
    "//models:mlp.py": ("models/mlp.py",),
    "//models:mlp.safetensors": ("models/mlp.safetensors",),
}


def _request(pkg_attrs: dict[str, Any], *, expected: Any = "planned") -> BazelPlan:
    targets = {
        "//models:mlp": PlanTarget(
            kind="torch_model",
            package="models",
            name="mlp",
            output_root=ROOT,
            attrs=MLP,
            files=FILES,
        ),
        "//models:mlp_pt2": PlanTarget(
            kind="aoti_package",
            package="models",
            name="mlp_pt2",
            output_root=ROOT,
            attrs={"name": "mlp_pt2", "model": "//models:mlp", **pkg_attrs},
            files={},
        ),
    }
    plan = BazelPlan(
        label="//models:mlp_pt2",
        targets=targets,
        expected=None,
        report=f"{ROOT}/models/mlp_pt2.kiln_plan.json",
    )
    if expected == "planned":  # what Bazel declares when its catalogue is current
        host = HostFacts.of_this_machine()
        ctx, info = planner.analyze(plan, host)
        expected = planner.planned_graph(ctx.actions.declared, info)
    return plan.model_copy(update={"expected": expected})


def _run(plan: BazelPlan, where: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.chdir(where)
    Path("plan.json").write_text(plan.to_json())
    return planner.main(["plan.json"])


def test_plan_writes_kilns_specs_under_bazels_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(_request({}), tmp_path, monkeypatch) == 0
    out = tmp_path / ROOT / "models"
    join = json.loads((out / "mlp_pt2.join.json").read_text())
    assert join["program"] == f"{ROOT}/models/mlp_pt2.program.pt2"
    assert join["output"] == f"{ROOT}/models/mlp_pt2.pt2"
    assert as_kiln((out / "mlp_pt2.join.json").read_text()).count("kiln-out/models/") == 4
    assert (out / "mlp_pt2_loader/mlp_pt2.h").read_text().count("class MlpPt2 {") == 1
    report = json.loads((out / "mlp_pt2.kiln_plan.json").read_text())
    assert [a["mnemonic"] for a in report["graph"]["actions"]] == [
        "TorchExport",
        "AotiCompile",
        "AotiJoin",
        "AotiValidate",
        "AotiManifest",
    ]


def test_a_graph_bazel_did_not_declare_is_a_stale_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    planned = _request({}).expected
    assert planned is not None
    declared = planned.model_copy(update={"actions": planned.actions[:2]})  # an older rule's
    assert _run(_request({}, expected=declared), tmp_path, monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "ERROR: //models:mlp_pt2: kiln's aoti_package rule plans other actions than Bazel "
        "declared: rules/private/catalogue.bzl is out of date with rules/aoti/aoti_package.py\n"
        "  hint: regenerate it with `python -m kiln.bazel.generate` in the kiln repository, "
        "and rebuild\n"
    )
    assert "AotiValidate" in err  # both graphs are shown
    assert not (tmp_path / ROOT).exists()  # nothing half-written


def test_attributes_bazel_had_no_shape_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(_request({}, expected=None), tmp_path, monkeypatch) == 1
    assert "Bazel's aoti_package rule has no action graph for these attributes" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("attrs", "build"),
    [
        ({"rtol": "tight"}, 'rtol = "tight"'),
        ({"validat": False}, "validat = False"),
        ({"device": "gpu"}, 'device = "gpu"'),
    ],
)
def test_a_bad_attribute_is_the_message_kiln_gives(
    attrs: dict[str, Any],
    build: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "models/BUILD": f"""\
                load("@kiln//rules:defs.bzl", "aoti_package", "torch_model")
                torch_model(
                    name = "mlp",
                    src = "mlp.py",
                    factory = "mlp:build",
                    inputs = [{{"name": "x", "shape": [8, 10]}}],
                )
                aoti_package(name = "mlp_pt2", model = ":mlp", {build})
                """,
            "models/mlp.py": "",
        }
    )
    kiln = ws.kiln("query", "//models:mlp_pt2")
    assert kiln.code == 1
    message = kiln.err.split(": ", 2)[2]  # after `ERROR: models/BUILD:8:1`
    capsys.readouterr()
    assert _run(_request(attrs, expected=None), tmp_path, monkeypatch) == 1
    assert capsys.readouterr().err == f"ERROR: {message}"


def test_a_record_of_another_format_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("plan.json").write_text(json.dumps({"kind": "BazelPlan", "format": 2}))
    assert planner.main(["plan.json"]) == 1
    assert capsys.readouterr().err == (
        "ERROR: plan.json is BazelPlan format 2; this kiln reads format 1 "
        "(written by another kiln version: rebuild it)\n"
    )
