"""Contract tests with a recording stand-in for torch_tensorrt: the refit split of trt_engine.

A Linux trt_engine builds its engine once per architecture and refits weights into
it. Each test analyzes the target with the rule (an imagined GPU machine's probe),
runs the actions it declares in-process on the CPU, in order (TorchExport for real,
TrtCompile and TrtEngine against trt_standin.StandIn), and pins what kiln calls and
writes: the compile sees the structure (placeholders, never the weights), the refit
gets the program with the real weights, and where refit is not available the engine
is built with the weights and the manifest says so. Whether real TensorRT refits as
Torch-TensorRT's sources say is checked on the GPU machine only
(tools/gpu_check.sh, step refit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from kiln.action_specs import ExportSpec, TrtCompileSpec, TrtEngineSpec
from kiln.actions import torch_export
from kiln.actions.tensorrt import compile_structure as trt_compile
from kiln.actions.tensorrt import engine as trt_engine
from safetensors.torch import load_file
from trt_fixtures import GPU_STANDARD, analyze, by_mnemonic, written
from trt_manifests import record
from trt_standin import StandIn, engine_bytes, refit_engine_bytes
from trt_tiny import TINY, eager_state, model_execroot

pytestmark = pytest.mark.torch


@pytest.fixture
def execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_refit_tiny") as root:
        yield root


def _on_cpu(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "device": "cpu"}  # the rule says cuda; there is none here


def _run_split(
    monkeypatch: pytest.MonkeyPatch, standin: StandIn, attrs: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """Analyze a Linux trt_engine and run its TorchExport, TrtCompile and TrtEngine."""
    _, actions = analyze(
        monkeypatch, {"name": "tiny_trt", **(attrs or {})}, model=TINY, probe=GPU_STANDARD
    )
    export = _on_cpu(written(actions, "kiln-out/models/tiny_trt.export.json"))
    torch_export.main(record(export, ExportSpec))
    standin.install(monkeypatch)
    trt_compile.main(
        record(_on_cpu(written(actions, "kiln-out/models/tiny_trt.compile.json")), TrtCompileSpec)
    )
    trt_engine.main(
        record(_on_cpu(written(actions, "kiln-out/models/tiny_trt.trt.json")), TrtEngineSpec)
    )
    manifest: dict[str, Any] = json.loads(
        Path("kiln-out/models/tiny_trt.manifest.json").read_text()
    )
    return actions, manifest


def test_contract_with_standin_the_compile_reads_the_structure_and_no_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule's graph: the engine is compiled from the structure alone, so a change of the
    model's weights leaves TrtCompile's inputs (and key) as they were."""
    _, actions = analyze(monkeypatch, {"name": "tiny_trt"}, model=TINY, probe=GPU_STANDARD)
    assert [a.mnemonic for a in actions if a.mnemonic != "FileWrite"] == [
        "TorchExport",
        "TrtCompile",
        "TrtEngine",
        "TrtLoader",
    ]
    compile_ = by_mnemonic(actions, "TrtCompile")
    assert {f.path for f in compile_.inputs} == {
        "kiln-out/models/tiny_trt.compile.json",
        "kiln-out/models/tiny_trt.structure.pt2",
        "kiln-out/models/tiny_trt.needs.json",
    }
    assert (
        written(actions, "kiln-out/models/tiny_trt.compile.json")["settings"]["immutable_weights"]
        is False
    )
    engine = by_mnemonic(actions, "TrtEngine")
    assert {f.path for f in engine.inputs} == {
        "kiln-out/models/tiny_trt.trt.json",
        "kiln-out/models/tiny_trt.refittable.ep",
        "kiln-out/models/tiny_trt.structure.pt2",
        "kiln-out/models/tiny_trt.weights.safetensors",
        "kiln-out/models/tiny_trt.needs.json",
    }
    assert compile_.resources.gpu == engine.resources.gpu == 1


def test_contract_with_standin_refit_puts_the_weights_into_the_compiled_program(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TrtCompile: dynamo.compile of the structure, refittable, then save. TrtEngine: load it,
    refit_module_weights with the program holding the real weights, save, engines and a
    manifest that says the weights were refit."""
    standin = StandIn(save_error=None)
    _, manifest = _run_split(monkeypatch, standin)
    assert standin.names() == ["Input", "compile", "save", "load", "refit_module_weights", "save"]

    compiled = standin.call("compile")
    assert compiled.kwargs["immutable_weights"] is False
    state = eager_state()
    structure = compiled.args[0].state_dict
    assert structure.keys() == state.keys()
    for name, value in state.items():  # the compile never sees a weight value
        assert not torch.equal(structure[name], value), name
    first_save = standin.calls[2]
    assert first_save.args[1] == "kiln-out/models/tiny_trt.refittable.ep"

    (load,) = [c for c in standin.calls if c.name == "load"]
    assert load.args == ("kiln-out/models/tiny_trt.refittable.ep",)
    refit = standin.call("refit_module_weights")
    new_weights = refit.args[1].state_dict
    for name, value in state.items():
        assert torch.equal(new_weights[name], value), name
    assert refit.kwargs["verify_output"] is True
    assert refit.kwargs["in_place"] is False
    (example,) = refit.kwargs["arg_inputs"]
    assert tuple(example.shape) == (8, 10)

    # refit returns a loaded program's module, its engine inline: found, and not a fallback op
    engine = execroot / "kiln-out/models/tiny_trt.engines/tiny_trt.engine"
    assert engine.read_bytes() == refit_engine_bytes(0, refit.args[1])
    (record,) = manifest["engines"]
    assert record["submodule"] == "_run_on_acc_0"
    assert [b["name"] for b in record["inputs"]] == ["x"]
    assert manifest["fallback_ops"] == {}
    assert manifest["raw_engine"] == {"deployable": True, "problems": []}
    weights = execroot / "kiln-out/models/tiny_trt.weights.safetensors"
    assert manifest["weights"] == {
        "refit": True,
        "how": "refit with torch_tensorrt.dynamo.refit_module_weights into the program "
        "TrtCompile built from the model's structure (torch_tensorrt.dynamo.compile, "
        "immutable_weights False): no engine build",
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
    }
    assert manifest["settings"]["immutable_weights"] is False
    assert load_file(str(weights)).keys() == state.keys()


def test_contract_with_standin_without_refit_the_engine_is_built_with_the_weights(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where this Torch-TensorRT cannot refit (@needs_refit raises NotImplementedError), the
    program with its weights is compiled, and the manifest says why."""
    standin = StandIn(save_error=None, refit=False)
    _, manifest = _run_split(monkeypatch, standin)
    assert standin.names() == ["Input", "compile", "save", "Input", "compile", "save"]
    state = eager_state()
    rebuilt = standin.calls[4].args[0].state_dict
    for name, value in state.items():
        assert torch.equal(rebuilt[name], value), name
    assert (execroot / "kiln-out/models/tiny_trt.engines/tiny_trt.engine").read_bytes() == (
        engine_bytes(0)
    )
    assert manifest["weights"]["refit"] is False
    assert manifest["weights"]["how"] == (
        "built with the weights, since torch_tensorrt 2.13.0 has ENABLED_FEATURES.refit False: "
        "a change of weights rebuilds the engine"
    )


def test_refit_is_off_for_a_toolchain_that_cannot_and_for_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cannot = GPU_STANDARD.__class__(**{**GPU_STANDARD.__dict__, "refit": False})
    for probe, attrs in ((cannot, {}), (GPU_STANDARD, {"refit": False})):
        _, actions = analyze(monkeypatch, {"name": "tiny_trt", **attrs}, model=TINY, probe=probe)
        assert [a.mnemonic for a in actions if a.mnemonic != "FileWrite"] == [
            "TrtEngine",
            "TrtLoader",
        ]
        assert written(actions, "kiln-out/models/tiny_trt.trt.json")["refit"] is None
    _, actions = analyze(monkeypatch, {"name": "tiny_win"}, windows_rule=True, model=TINY)
    assert "TrtCompile" not in [a.mnemonic for a in actions]


def test_immutable_weights_and_refit_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.rule_api import AnalysisError

    with pytest.raises(AnalysisError) as error:
        analyze(monkeypatch, {"name": "tiny_trt", "immutable_weights": True}, model=TINY)
    assert str(error.value).endswith("immutable_weights = True builds engines that cannot be refit")


def test_a_loaded_program_reaches_refit_without_torch_s_guards_child() -> None:
    """Real torch: ExportedProgram.module() adds `_guards_fn`, and Torch-TensorRT 2.11's refit
    took a loaded program with that child for one without inline engines (bare
    AssertionError on the H200). The module refit gets has no such child."""
    import torch
    from kiln.actions.tensorrt.refit import _as_module

    program = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),))
    assert "_guards_fn" in dict(program.module().named_children())
    assert "_guards_fn" not in dict(_as_module(program).named_children())
