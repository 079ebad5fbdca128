"""The typed seam between rules and actions: every rule's specs, and what a bad spec gets.

Rules build spec records (kiln.action_specs) at analysis; FileWrite actions write
them as canonical JSON; each `python -m kiln.actions.<name>` reads its record back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kiln import action_specs, package_specs
from kiln.action_graph import Action
from kiln.action_specs import (
    DynamicDim,
    ExportSpec,
    ModelSignature,
    Spec,
    SpecError,
    TensorSpec,
    TrtLoaderSpec,
)
from kiln.analysis.analyzer import Analyzer
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.loading.graph import GraphBuilder
from kiln.rules import load_rule

from tests.kiln_workspace import MakeWorkspace

SPECS: dict[str, type[Spec]] = {
    cls.kind: cls
    for module in (action_specs, package_specs)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, Spec) and cls is not Spec
}

WORKSPACE = {
    "models/mlp.py": "def build(): ...\n",
    "models/w.safetensors": "",
    "models/BUILD": """
        torch_model(
            name = "mlp",
            src = "mlp.py",
            factory = "mlp:build",
            factory_kwargs = {"width": 64, "act": "relu", "scale": 0.5, "bias": True},
            weights = "w.safetensors",
            inputs = [
                {"name": "x", "shape": [8, 10]},
                {"name": "ids", "shape": [8], "dtype": "int64", "low": 0, "high": 100},
            ],
            dynamic_dims = [
                {"name": "batch", "min": 1, "max": 64, "opt": 16, "axes": {"x": 0, "ids": 0}},
            ],
        )
        aoti_package(name = "mlp_pt2", model = ":mlp", inductor_configs = {"max_autotune": False})
        aoti_package(
            name = "mlp_cuda", model = ":mlp", device = "cuda", validate = False,
            weights = "separate",
        )
        model_weights(
            name = "init", src = "mlp.py", factory = "mlp:build", seed = 3, out = "init.pt",
        )
        trt_engine(name = "mlp_trt", model = ":mlp")
        trt_windows_engine(name = "mlp_win", model = ":mlp", hardware_compatible = True)
    """,
}
GPU_PROBE = {
    "python": "3.12.3",
    "os": "linux",
    "arch": "x86_64",
    "torch": "2.13.0+cu130",
    "cuda": "13.0",
    "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "memory_mb": 143771}],
    "torch_tensorrt": "2.13.0",
    "torch_tensorrt_dist": "torch_tensorrt",
    "flavour": "standard",
    "tensorrt": "11.0.0.12",
    "tensorrt_dist": "tensorrt_cu13_libs",
    "windows_cross_compile": True,
    "refit": True,
}


def _analyze(make_workspace: MakeWorkspace, tmp_path: Path, monkeypatch: Any) -> list[Action]:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(GPU_PROBE))
    monkeypatch.setenv("KILN_TRT_PROBE_JSON", str(probe))
    ws = make_workspace(WORKSPACE)
    loader = ws.loader()
    labels = [f"//models:{t}" for t in ("mlp_pt2", "mlp_cuda", "init", "mlp_trt", "mlp_win")]
    graph = GraphBuilder(loader).build(labels)
    analyzer = Analyzer(
        graph, load_rule, loader.location_of, ToolchainResolver(HostFacts.of_this_machine())
    )
    return analyzer.analyze(labels).actions


def test_every_spec_of_every_rule_reads_back_as_its_record(
    make_workspace: MakeWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rule's spec files parse as the record their kind names, byte for byte."""
    kinds: dict[str, int] = {}
    for action in _analyze(make_workspace, tmp_path, monkeypatch):
        if action.content is None or not action.outputs[0].path.endswith(".json"):
            continue
        text = action.content.decode()
        kind = json.loads(text)["kind"]
        record = SPECS[kind].from_json(text, source=action.outputs[0].path)
        assert record.to_json() == text
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds == {
        "ExportSpec": 3,
        "CompileSpec": 2,
        "TrtCompileSpec": 1,
        "JoinSpec": 2,
        "ManifestSpec": 2,
        "ValidateSpec": 1,
        "WeightsSpec": 1,
        "TrtEngineSpec": 2,
        "TrtLoaderSpec": 2,
    }


def test_a_python_action_reads_the_spec_it_is_given(
    make_workspace: MakeWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The argv of every Python action names a spec whose kind is the one that module reads."""
    readers = {
        "kiln.actions.torch_export": "ExportSpec",
        "kiln.actions.aoti_compile": "CompileSpec",
        "kiln.actions.aoti_join": "JoinSpec",
        "kiln.actions.validate": "ValidateSpec",
        "kiln.actions.aoti_manifest": "ManifestSpec",
        "kiln.actions.tensorrt.aoti_package": "TrtPackageSpec",
        "kiln.actions.tensorrt.aoti_refit": "TrtRefitSpec",
        "kiln.actions.init_weights": "WeightsSpec",
        "kiln.actions.tensorrt.engine": "TrtEngineSpec",
        "kiln.actions.tensorrt.compile_structure": "TrtCompileSpec",
        "kiln.actions.tensorrt.render_loader": "TrtLoaderSpec",
    }
    actions = _analyze(make_workspace, tmp_path, monkeypatch)
    written = {a.outputs[0].path: a.content for a in actions if a.content is not None}
    for action in actions:
        if action.argv[1:2] == ("-m",):
            content = written[action.argv[3]]
            assert content is not None
            assert json.loads(content)["kind"] == readers[action.argv[2]], action.argv


# -- what from_json refuses --------------------------------------------------------------------

EXPORT = ExportSpec.from_json(
    json.dumps(
        {
            "kind": "ExportSpec",
            "format": 1,
            "model": {
                "label": "//m:m",
                "source": {
                    "src": "m/m.py",
                    "factory": "m:build",
                    "factory_kwargs": {},
                    "weights": None,
                    "seed": 0,
                    "python_deps": [],
                    "torchvision_cpu_ops": False,
                },
                "signature": {
                    "inputs": [
                        {
                            "name": "x",
                            "shape": [2, 3],
                            "dtype": "float32",
                            "low": None,
                            "high": None,
                        }
                    ],
                    "dynamic_dims": [],
                },
            },
            "device": "cpu",
            "output": "kiln-out/m/m.structure.pt2",
            "goldens": "kiln-out/m/m.golden.safetensors",
            "weights": "kiln-out/m/m.weights.safetensors",
            "needs": "kiln-out/m/m.needs.json",
        }
    )
)


def _edited(change: Any) -> str:
    data = json.loads(EXPORT.to_json())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["model"]["signature"]["inputs"][0].pop("dtype"),
            "s.json is not a valid ExportSpec: missing model.signature.inputs[0].dtype",
        ),
        (
            lambda d: d["model"]["source"].update(srcs="m/m.py"),
            "s.json is not a valid ExportSpec: model.source.srcs: Extra inputs are not permitted",
        ),
        (
            lambda d: d["model"]["signature"]["inputs"][0].update(shape=[2, "3"]),
            "s.json is not a valid ExportSpec: model.signature.inputs[0].shape[1]: "
            "Input should be a valid integer",
        ),
        (
            lambda d: d.update(device="tpu"),
            "s.json is not a valid ExportSpec: device: Input should be 'cpu' or 'cuda'",
        ),
        (
            lambda d: d.update(kind="PackageSpec"),
            "s.json holds a PackageSpec record where an ExportSpec was expected",
        ),
        (
            lambda d: d.update(format=0),
            "s.json is ExportSpec format 0; this kiln reads format 1 (written by another kiln "
            "version: rebuild it)",
        ),
    ],
    ids=["missing", "unknown", "type", "literal", "kind", "format"],
)
def test_a_spec_that_is_not_the_record_is_refused_naming_the_key(change: Any, message: str) -> None:
    with pytest.raises(SpecError) as error:
        ExportSpec.from_json(_edited(change), source="s.json")
    assert str(error.value) == message


def test_an_action_given_a_bad_spec_fails_in_one_line(tmp_path: Path) -> None:
    """No KeyError traceback inside the action: one kiln-action-error line, exit code 1."""
    spec = tmp_path / "loader.json"
    data = json.loads(
        TrtLoaderSpec(
            label="//m:t", name="t", manifest="m.json", output="o", cc_loader=True
        ).to_json()
    )
    del data["cc_loader"]
    spec.write_text(json.dumps(data))
    run = subprocess.run(
        [sys.executable, "-m", "kiln.actions.tensorrt.render_loader", str(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert (
        run.stderr == f"kiln-action-error: {spec} is not a valid TrtLoaderSpec: missing cc_loader\n"
    )


# -- one min/opt/max policy ----------------------------------------------------------------------


def test_ranges_widen_each_dynamic_dim_and_keep_an_opt_of_zero() -> None:
    """opt = 0 is an opt (one policy had dropped it as falsy), and opt defaults to the example."""
    signature = ModelSignature(
        inputs=(TensorSpec(name="x", shape=(4, 3)), TensorSpec(name="y", shape=(4,))),
        dynamic_dims=(
            DynamicDim(name="batch", min=0, max=8, opt=0, axes={"x": 0}),
            DynamicDim(name="n", min=1, max=9, axes={"y": 0}),
        ),
    )
    x, y = signature.ranges()
    assert (x.min, x.opt, x.max) == ((0, 3), (0, 3), (8, 3))
    assert (y.min, y.opt, y.max) == ((1,), (4,), (9,))
    assert signature.shape_points() == (
        ("min", {"x": (0, 3), "y": (1,)}),
        ("opt", {"x": (0, 3), "y": (4,)}),
        ("max", {"x": (8, 3), "y": (9,)}),
    )


def test_a_static_model_is_checked_at_its_example_alone() -> None:
    signature = ModelSignature(inputs=(TensorSpec(name="x", shape=(2, 3)),), dynamic_dims=())
    assert signature.shape_points() == (("example", {"x": (2, 3)}),)


# -- value ranges of integer inputs --------------------------------------------------------------


def test_an_integer_input_declares_the_values_it_takes() -> None:
    ids = TensorSpec(name="ids", shape=(2, 8), dtype="int64", low=0, high=50257)
    assert ids.value_range == (0, 50257)
    assert TensorSpec(name="x", shape=(2,)).value_range is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"dtype": "float32", "low": 0, "high": 4},
            "input 'ids' is float32: low/high apply to integer inputs (int32, int64, int8) only",
        ),
        ({"dtype": "int64", "low": 0}, "input 'ids': give both low and high, or neither"),
        (
            {"dtype": "int64", "low": 5, "high": 5},
            "input 'ids': low 5 must be below high 5 (high is exclusive, as in torch.randint)",
        ),
        (
            {"dtype": "int8", "low": 0, "high": 300},
            "input 'ids': [0, 300) does not fit int8 ([-128, 128))",
        ),
    ],
    ids=["float", "half", "empty", "overflow"],
)
def test_a_value_range_that_cannot_be_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TensorSpec(name="ids", shape=(2, 8), **fields)
