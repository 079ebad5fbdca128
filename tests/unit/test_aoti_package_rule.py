"""aoti_package analysis: compiled once per architecture, weights joined after.

The rule runs on a TorchModelInfo sample (no action runs): which files each action
reads is what makes a weights-only change skip the compile, so that is pinned here,
with the settings the rule refuses because they would put weight values back into
the compiled code.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kiln.action_graph import Action, File
from kiln.rule_api import AnalysisError, AnalyzedTarget, DefaultInfo
from kiln.rules.aoti_package import RULE, AotiPackageAttrs, implementation
from kiln.rules.torch_model import TorchModelInfo

from tests.model_fixtures import MLP, rule_context

# The mlp with a weights file, as torch_model(weights = "mlp.safetensors") hands it over.
WEIGHTED = TorchModelInfo(
    MLP.spec.model_copy(
        update={"source": MLP.spec.source.model_copy(update={"weights": "models/w.safetensors"})}
    ),
    MLP.src,
    (),
    File("models/w.safetensors"),
    (),
)


def _analyze(**attrs: Any) -> tuple[list[object], list[Action]]:
    validated = AotiPackageAttrs.model_validate({"name": "mlp_pt2", "model": MLP.label, **attrs})
    target = AnalyzedTarget(
        MLP.label, {TorchModelInfo: WEIGHTED, DefaultInfo: DefaultInfo(tuple(WEIGHTED.files))}
    )
    ctx = rule_context(RULE, "//models:mlp_pt2", validated, {MLP.label: target})
    return implementation(ctx), ctx.actions.declared


def _action(actions: list[Action], mnemonic: str) -> Action:
    (found,) = [a for a in actions if a.mnemonic == mnemonic]
    return found


def _paths(files: tuple[File, ...]) -> set[str]:
    return {f.path.removeprefix("kiln-out/models/") for f in files}


def _spec(actions: list[Action], name: str) -> dict[str, Any]:
    (found,) = [a for a in actions if a.outputs[0].path == f"kiln-out/models/{name}"]
    assert found.content is not None
    loaded: dict[str, Any] = json.loads(found.content)
    return loaded


def test_the_compile_reads_the_structure_alone() -> None:
    """No weights file and no model source reach the compile: only the structure."""
    _, actions = _analyze()
    assert [a.mnemonic for a in actions if a.mnemonic != "FileWrite"] == [
        "TorchExport",
        "AotiCompile",
        "AotiJoin",
        "AotiValidate",
    ]
    export = _action(actions, "TorchExport")
    assert _paths(export.inputs) == {"mlp_pt2.export.json", "models/mlp.py", "models/w.safetensors"}
    assert _paths(export.outputs) == {
        "mlp_pt2.structure.pt2",
        "mlp_pt2.weights.safetensors",
        "mlp_pt2.golden.safetensors",
    }
    compile_ = _action(actions, "AotiCompile")
    assert _paths(compile_.inputs) == {"mlp_pt2.compile.json", "mlp_pt2.structure.pt2"}
    assert _paths(compile_.outputs) == {"mlp_pt2.program.pt2", "mlp_pt2.layout.json"}
    join = _action(actions, "AotiJoin")
    assert _paths(join.inputs) == {
        "mlp_pt2.join.json",
        "mlp_pt2.program.pt2",
        "mlp_pt2.layout.json",
        "mlp_pt2.weights.safetensors",
    }
    assert _paths(join.outputs) == {"mlp_pt2.pt2"}
    # Validation runs the joined package, the final artifact, against eager's goldens
    # (made by the export with the same weights); it reads no model source.
    assert _paths(_action(actions, "AotiValidate").inputs) == {
        "mlp_pt2.validate.json",
        "mlp_pt2.pt2",
        "mlp_pt2.golden.safetensors",
    }


def test_the_compile_spec_holds_no_label_path_of_weights_or_model() -> None:
    _, actions = _analyze(inductor_configs={"max_autotune": False})
    assert _spec(actions, "mlp_pt2.compile.json") == {
        "kind": "CompileSpec",
        "format": 1,
        "structure": "kiln-out/models/mlp_pt2.structure.pt2",
        "output": "kiln-out/models/mlp_pt2.program.pt2",
        "layout": "kiln-out/models/mlp_pt2.layout.json",
        "device": "cpu",
        "cpu_target": "native",
        "inductor_configs": {"max_autotune": False},
    }
    join = _spec(actions, "mlp_pt2.join.json")
    assert join["form"] == "packaged"
    assert join["provenance"]["target"] == "//models:mlp_pt2"
    assert join["provenance"]["model"] == "//models:mlp"


def test_packaged_form_delivers_the_pt2_and_its_weights_file() -> None:
    (info, *_), actions = _analyze()
    assert isinstance(info, DefaultInfo)
    assert {"mlp_pt2.pt2", "mlp_pt2.weights.safetensors"} <= _paths(info.files)
    assert _spec(actions, "mlp_pt2.validate.json")["weights"] is None


def test_separate_form_validates_the_package_with_its_weights_file() -> None:
    _, actions = _analyze(weights="separate")
    assert _spec(actions, "mlp_pt2.join.json")["form"] == "separate"
    validate = _action(actions, "AotiValidate")
    assert {"mlp_pt2.pt2", "mlp_pt2.weights.safetensors"} <= _paths(validate.inputs)
    assert _spec(actions, "mlp_pt2.validate.json")["weights"] == (
        "kiln-out/models/mlp_pt2.weights.safetensors"
    )
    header = next(a for a in actions if a.outputs[0].path.endswith("mlp_pt2.h")).content
    assert header is not None
    assert b'kWeightsForm = "separate";' in header
    python_loader = next(a for a in actions if a.outputs[0].path.endswith("mlp_pt2_loader.py"))
    assert python_loader.content is not None
    assert b"    WEIGHTS_FORM = 'separate'\n" in python_loader.content


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"freezing": True},
            "inductor_configs sets 'freezing', which folds the weights into the compiled graph: "
            "kiln compiles the program once per architecture, without weight values, and joins "
            "the weights after, so a retrained model needs no new compile",
        ),
        (
            {"aot_inductor": {"use_runtime_constant_folding": True}},
            "inductor_configs sets 'aot_inductor.use_runtime_constant_folding', which computes "
            "constants from weights when loaded:",
        ),
        (
            {"always_keep_tensor_constants": False},
            "inductor_configs sets 'always_keep_tensor_constants', which kiln sets itself",
        ),
        (
            {"aot_inductor.package_constants_in_so": True},
            "inductor_configs sets 'aot_inductor.package_constants_in_so', which kiln sets itself",
        ),
        (
            {"aot_inductor.metadata": {"kiln.target": "x"}},
            "'aot_inductor.metadata' must be a dict of strings whose keys do not start with "
            "'kiln.'",
        ),
    ],
)
def test_settings_that_put_weight_values_into_code_are_refused(
    configs: dict[str, Any], message: str
) -> None:
    with pytest.raises(AnalysisError) as error:
        _analyze(inductor_configs=configs)
    assert message in str(error.value)
    assert error.value.label == "//models:mlp_pt2"


def test_freezing_off_and_user_metadata_are_fine() -> None:
    _, actions = _analyze(inductor_configs={"freezing": False, "aot_inductor.metadata": {"a": "b"}})
    assert _spec(actions, "mlp_pt2.compile.json")["inductor_configs"]["freezing"] is False
