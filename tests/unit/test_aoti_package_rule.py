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
from kiln import cpu_isa
from kiln.action_graph import Action, File
from kiln.cache.digest import digest_bytes
from kiln.exec.action_key import compute_key
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.rule_api import AnalysisError, AnalyzedTarget, DefaultInfo, RuleContext
from kiln.rules.aoti.aoti_package import RULE, AotiPackageAttrs, implementation
from kiln.rules.model.torch_model import TorchModelInfo

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
        "AotiManifest",
    ]
    export = _action(actions, "TorchExport")
    assert _paths(export.inputs) == {"mlp_pt2.export.json", "models/mlp.py", "models/w.safetensors"}
    assert _paths(export.outputs) == {
        "mlp_pt2.structure.pt2",
        "mlp_pt2.weights.safetensors",
        "mlp_pt2.golden.safetensors",
        "mlp_pt2.needs.json",  # what loading the program imports: later keys hold it
    }
    compile_ = _action(actions, "AotiCompile")
    assert _paths(compile_.inputs) == {
        "mlp_pt2.compile.json",
        "mlp_pt2.structure.pt2",
        "mlp_pt2.needs.json",
    }
    assert _paths(compile_.outputs) == {"mlp_pt2.program.pt2", "mlp_pt2.layout.json"}
    join = _action(actions, "AotiJoin")
    assert _paths(join.inputs) == {
        "mlp_pt2.join.json",
        "mlp_pt2.program.pt2",
        "mlp_pt2.layout.json",
        "mlp_pt2.weights.safetensors",
        "mlp_pt2.needs.json",
    }
    assert _paths(join.outputs) == {"mlp_pt2.pt2"}
    # Validation runs the joined package, the final artifact, against eager's goldens
    # (made by the export with the same weights); it reads no model source.
    assert _paths(_action(actions, "AotiValidate").inputs) == {
        "mlp_pt2.validate.json",
        "mlp_pt2.pt2",
        "mlp_pt2.golden.safetensors",
        "mlp_pt2.needs.json",
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
        "cpu_target": "x86-64-v3",
        "cpu_isa": "x86-64-v3",
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


def test_ops_left_to_pytorch_need_the_tensorrt_backend() -> None:
    with pytest.raises(AnalysisError) as error:
        _analyze(torch_executed_ops=["torch.ops.aten.relu.default"])
    assert str(error.value).startswith("torch_executed_ops needs backend = 'tensorrt'")


def test_freezing_off_and_user_metadata_are_fine() -> None:
    _, actions = _analyze(inductor_configs={"freezing": False, "aot_inductor.metadata": {"a": "b"}})
    assert _spec(actions, "mlp_pt2.compile.json")["inductor_configs"]["freezing"] is False


# -- cpu_target: the default runs anywhere x86-64-v3; `native` is the host's, keyed ------------


def _keys_on(host: HostFacts, **attrs: Any) -> dict[str, str]:
    """The key of each action of mlp_pt2 analyzed on `host`, by output (the graph's
    inputs: each spec by its content, other files by one fixed digest)."""
    validated = AotiPackageAttrs.model_validate({"name": "mlp_pt2", "model": MLP.label, **attrs})
    target = AnalyzedTarget(
        MLP.label, {TorchModelInfo: WEIGHTED, DefaultInfo: DefaultInfo(tuple(WEIGHTED.files))}
    )
    ctx = RuleContext(
        RULE, "//models:mlp_pt2", validated, {MLP.label: target}, ToolchainResolver(host)
    )
    implementation(ctx)
    actions = ctx.actions.declared
    written = {a.outputs[0].path: digest_bytes(a.content) for a in actions if a.content}
    keys: dict[str, str] = {}
    for action in actions:
        digests = {f.path: written.get(f.path, digest_bytes(b"input")) for f in action.inputs}
        key = compute_key(action, digests, "sha256").key
        keys.update(dict.fromkeys((f.path for f in action.outputs), key))
    return keys


def _host_under(monkeypatch: pytest.MonkeyPatch, capability: str) -> HostFacts:
    """This machine as torch's detection sees it under ATEN_CPU_CAPABILITY=`capability`:
    a host of another instruction set, simulated by the override torch honours."""
    monkeypatch.setenv(cpu_isa.CAPABILITY_ENV, capability)
    cpu_isa.host_isa.cache_clear()
    try:
        return HostFacts.of_this_machine()
    finally:
        cpu_isa.host_isa.cache_clear()


def test_two_hosts_of_other_instruction_sets_differ_for_native_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    avx2 = _host_under(monkeypatch, "avx2")
    plain = _host_under(monkeypatch, "default")
    if avx2.cpu_isa != "x86-64-v3":
        pytest.skip(f"this CPU has no AVX2 ({avx2.cpu_isa})")
    assert plain.cpu_isa in ("x86-64", "x86-64-v2")

    compiled = "kiln-out/models/mlp_pt2.program.pt2"
    native = _keys_on(avx2, cpu_target="native"), _keys_on(plain, cpu_target="native")
    assert native[0][compiled] != native[1][compiled]
    # the default: the same key on both hosts, for every action
    assert _keys_on(avx2) == _keys_on(plain)
    assert _keys_on(avx2) == _keys_on(avx2, cpu_target="x86-64-v3")


def test_native_resolves_to_the_hosts_isa_in_spec_platform_and_provenance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = _host_under(monkeypatch, "avx2")
    if host.cpu_isa != "x86-64-v3":
        pytest.skip(f"this CPU has no AVX2 ({host.cpu_isa})")
    validated = AotiPackageAttrs.model_validate(
        {"name": "mlp_pt2", "model": MLP.label, "cpu_target": "native"}
    )
    target = AnalyzedTarget(
        MLP.label, {TorchModelInfo: WEIGHTED, DefaultInfo: DefaultInfo(tuple(WEIGHTED.files))}
    )
    ctx = RuleContext(
        RULE, "//models:mlp_pt2", validated, {MLP.label: target}, ToolchainResolver(host)
    )
    implementation(ctx)
    actions = ctx.actions.declared
    assert _spec(actions, "mlp_pt2.compile.json")["cpu_isa"] == "x86-64-v3"
    assert _spec(actions, "mlp_pt2.join.json")["provenance"]["cpu_isa"] == "x86-64-v3"
    for mnemonic in ("TorchExport", "AotiCompile", "AotiJoin", "AotiValidate"):
        assert ("cpu_isa", "x86-64-v3") in _action(actions, mnemonic).platform


def test_a_named_level_puts_no_host_fact_in_the_platform() -> None:
    _, actions = _analyze(cpu_target="x86-64-v4")
    assert _spec(actions, "mlp_pt2.compile.json")["cpu_isa"] == "x86-64-v4"
    assert not any(name == "cpu_isa" for name, _ in _action(actions, "AotiCompile").platform)
