"""aoti_package(backend = "tensorrt") builds its engines once per architecture, as
trt_engine does, and refits retrained weights into them.

The rule is analyzed for an imagined GPU machine (its toolchains resolved as a
cluster's GPU node would give them), and the actions it declares run in-process on
the CPU, in order: TorchExport for real, TrtCompile and AotiPackage against the
recording stand-in for torch_tensorrt (trt_standin.StandIn). What Torch-TensorRT then
does with the refit module's AOTInductor packaging is checked on the GPU machine
only (tools/gpu_check.sh).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from kiln.action_graph import Action
from kiln.action_specs import ExportSpec, TrtCompileSpec
from kiln.actions import torch_export, weights_split
from kiln.actions.tensorrt import aoti_package, aoti_refit, package_archive
from kiln.actions.tensorrt import compile_structure as trt_compile
from kiln.host_facts import GPU_HOST, GPUS, HostFacts, Toolchain, ToolchainResolver
from kiln.package_specs import PackageManifest, TrtPackageSpec, TrtRefitSpec
from kiln.rule_api import RuleContext
from kiln.rules.aoti.aoti_package import RULE, AotiPackageAttrs, implementation
from kiln.rules.tensorrt.trt_toolchain import TENSORRT, Probe
from torch.export.pt2_archive import PT2ArchiveReader
from trt_fixtures import GPU_STANDARD, by_mnemonic, model_target, written
from trt_manifests import record
from trt_standin import StandIn, pickled_engine, unpickled_engine
from trt_tiny import TINY, eager_state, model_execroot

pytestmark = pytest.mark.torch

T = TypeVar("T")
NAME = "tiny_pt2"
OUT = f"kiln-out/models/{NAME}"


class _GpuNode:
    """The machine GPU actions run on (RemotePlatform): an H200 with Torch-TensorRT."""

    def __init__(self, probe: Probe) -> None:
        host = HostFacts.of_this_machine()
        self.host = HostFacts(
            os=host.os,
            arch=host.arch,
            python=host.python,
            python_impl=host.python_impl,
            interpreter=host.interpreter,
            distributions=tuple(sorted({*host.distributions, ("torch_tensorrt", "2.13.0")})),
        )
        self.probe = probe

    def resolve(self, toolchain: Toolchain[T]) -> T:
        if toolchain is TENSORRT:
            return self.probe  # type: ignore[return-value]
        if toolchain is GPUS:
            return self.probe.gpus  # type: ignore[return-value]
        assert toolchain is GPU_HOST
        return self.host  # type: ignore[return-value]


def _analyze(attrs: dict[str, Any] | None = None, probe: Probe = GPU_STANDARD) -> list[Action]:
    validated = AotiPackageAttrs.model_validate(
        {
            "name": NAME,
            "model": TINY.label,
            "device": "cuda",
            "backend": "tensorrt",
            **(attrs or {}),
        }
    )
    resolver = ToolchainResolver(HostFacts.of_this_machine(), _GpuNode(probe))
    ctx = RuleContext(
        RULE, f"//models:{NAME}", validated, {TINY.label: model_target(TINY)}, resolver
    )
    implementation(ctx)
    return ctx.actions.declared


def _mnemonics(actions: list[Action]) -> list[str]:
    return [a.mnemonic for a in actions if a.mnemonic != "FileWrite"]


def _inputs(action: Action) -> set[str]:
    return {f.path for f in action.inputs}


def _outputs(action: Action) -> set[str]:
    return {f.path for f in action.outputs}


def test_the_engines_and_the_package_around_them_are_built_from_the_structure() -> None:
    """TrtCompile and AotiPackage read no weights: a retrain leaves both keys alone, and
    AotiRefit alone gives the package its weights."""
    actions = _analyze()
    assert _mnemonics(actions) == [
        "TorchExport",
        "TrtCompile",
        "AotiPackage",
        "AotiRefit",
        "AotiValidate",
    ]
    assert _inputs(by_mnemonic(actions, "TrtCompile")) == {
        f"{OUT}.compile.json",
        f"{OUT}.structure.pt2",  # no weight values: a retrain leaves its key alone
        f"{OUT}.needs.json",  # what loading it imports, in place of the model's pins
    }
    compile_spec = written(actions, f"{OUT}.compile.json")
    assert compile_spec["settings"]["immutable_weights"] is False
    assert compile_spec["settings"]["min_block_size"] == 1  # the target's settings
    assert _inputs(by_mnemonic(actions, "AotiPackage")) == {
        f"{OUT}.package.json",
        f"{OUT}.refittable.ep",  # the engines of the structure, no weights
        f"{OUT}.needs.json",
    }
    assert _outputs(by_mnemonic(actions, "AotiPackage")) == {f"{OUT}.program.pt2"}
    assert written(actions, f"{OUT}.package.json")["compiled"] is True
    assert _inputs(by_mnemonic(actions, "AotiRefit")) == {
        f"{OUT}.refit.json",
        f"{OUT}.program.pt2",
        f"{OUT}.refittable.ep",
        f"{OUT}.structure.pt2",
        f"{OUT}.weights.safetensors",
        f"{OUT}.needs.json",
    }
    assert _outputs(by_mnemonic(actions, "AotiRefit")) == {f"{OUT}.pt2", f"{OUT}.manifest.json"}
    assert written(actions, f"{OUT}.refit.json")["refit"] == {
        "compiled": f"{OUT}.refittable.ep",
        "structure": f"{OUT}.structure.pt2",
        "weights": f"{OUT}.weights.safetensors",
    }
    assert all(
        by_mnemonic(actions, m).resources.gpu == 1
        for m in ("TrtCompile", "AotiPackage", "AotiRefit")
    )


def test_ops_left_to_pytorch_reach_every_compile_of_the_engines() -> None:
    ops = ["torch.ops.aten.relu.default"]
    actions = _analyze({"torch_executed_ops": ops})
    assert written(actions, f"{OUT}.compile.json")["settings"]["torch_executed_ops"] == ops
    assert written(actions, f"{OUT}.refit.json")["torch_executed_ops"] == ops  # a rebuild's
    unsplit = _analyze({"torch_executed_ops": ops, "refit": False})
    assert written(unsplit, f"{OUT}.package.json")["torch_executed_ops"] == ops


@pytest.mark.parametrize(
    ("attrs", "probe"),
    [({"refit": False}, GPU_STANDARD), ({}, dataclasses.replace(GPU_STANDARD, refit=False))],
    ids=["refit off", "toolchain cannot refit"],
)
def test_without_refit_the_engines_are_built_with_the_weights(
    attrs: dict[str, Any], probe: Probe
) -> None:
    actions = _analyze(attrs, probe)
    assert _mnemonics(actions) == ["TorchExport", "AotiPackage", "AotiValidate"]
    assert _inputs(by_mnemonic(actions, "AotiPackage")) == {
        f"{OUT}.package.json",
        f"{OUT}.ep.pt2",  # the program with its weights inside
        f"{OUT}.needs.json",
    }
    assert _outputs(by_mnemonic(actions, "AotiPackage")) == {f"{OUT}.pt2", f"{OUT}.manifest.json"}
    assert written(actions, f"{OUT}.package.json")["compiled"] is False


@pytest.fixture
def execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_refit_tiny") as root:
        yield root


def _on_cpu(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "device": "cpu"}  # the rule says cuda; there is none here


def _build(
    monkeypatch: pytest.MonkeyPatch,
    attrs: dict[str, Any] | None = None,
    seed: int = 5,
    refit: bool = True,
    **standin: Any,
) -> tuple[list[Action], StandIn]:
    """Analyze, then run TorchExport for real and the TensorRT actions against a fresh
    stand-in: (the actions, the stand-in of AotiPackage and AotiRefit)."""
    model = TINY.spec.model_copy(
        update={"source": TINY.spec.source.model_copy(update={"seed": seed})}
    )
    actions = _analyze(attrs)
    export = {**written(actions, f"{OUT}.export.json"), "model": model.model_dump(mode="json")}
    torch_export.main(record(_on_cpu(export), ExportSpec))
    StandIn(save_error=None, **standin).install(monkeypatch)
    trt_compile.main(record(_on_cpu(written(actions, f"{OUT}.compile.json")), TrtCompileSpec))
    recorder = StandIn(save_error=None, refit=refit, **standin)
    recorder.install(monkeypatch)
    recorder.saved[f"{OUT}.refittable.ep"] = _compiled_module(recorder)
    aoti_package.main(record(_on_cpu(written(actions, f"{OUT}.package.json")), TrtPackageSpec))
    aoti_refit.main(record(_on_cpu(written(actions, f"{OUT}.refit.json")), TrtRefitSpec))
    return actions, recorder


def _compiled_module(standin: StandIn) -> Any:
    """What TrtCompile saved (the stand-in's load of it, as ExportedProgram.module())."""
    structure = weights_split.load_structure(f"{OUT}.structure.pt2", "cpu")
    return StandIn(engines=standin.engines, fallback_op=standin.fallback_op)._graph_module(
        structure
    )


def _records(path: str) -> dict[str, bytes]:
    with PT2ArchiveReader(path) as reader:
        names = [n for n in reader.get_file_names() if not n.startswith(".data/")]
        return {n: reader.read_bytes(n) for n in names if "/" in n}


@pytest.fixture
def trt_actions(execroot: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """What AotiPackage and AotiRefit set for the processes they own; here, for a test."""
    del execroot
    for module in (aoti_package, aoti_refit):
        monkeypatch.setattr(module, "pin_temp_dirs", lambda: None)
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(variable, "unset")
    yield monkeypatch


def test_contract_with_standin_the_package_of_the_structure_gets_the_refit_engines(
    trt_actions: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """AotiPackage: the refittable program loaded and saved in the AOTInductor format,
    with the target's inductor_configs and dynamic shapes. AotiRefit: refit_module_weights
    with the program holding the real weights, then the package's engine object replaced
    by the refit one, nothing saved again."""
    configs = {"max_autotune": False}
    _, standin = _build(trt_actions, {"inductor_configs": configs})

    assert standin.names() == ["load", "save", "load", "refit_module_weights"]
    program_save = standin.call("save")
    assert program_save.args[1] == str(Path(f"{OUT}.program.pt2").resolve())
    assert program_save.kwargs["output_format"] == "aot_inductor"
    assert program_save.kwargs["retrace"] is True
    assert program_save.kwargs["inductor_configs"] == configs  # the target's, to the compile
    ((axis, dim),) = program_save.kwargs["dynamic_shapes"][0].items()  # the target's
    assert (axis, dim.__name__, dim.min, dim.max) == (0, "batch", 1, 64)
    refit = standin.call("refit_module_weights")
    for name, value in eager_state().items():
        assert torch.equal(refit.args[1].state_dict[name], value), name
    assert refit.kwargs["verify_output"] is True

    program, package = _records(f"{OUT}.program.pt2"), _records(f"{OUT}.pt2")
    engine = "data/constants/custom_obj_0"
    assert set(program) == set(package)
    assert package[engine] != program[engine]  # the refit engine
    assert package[engine] == pickled_engine(_refit_engine(refit))
    changed = {n for n in package if package[n] != program[n]}
    assert changed == {engine, "data/aotinductor/model/model_metadata.json"}
    assert "refit with torch_tensorrt.dynamo.refit_module_weights" in capfd.readouterr().out


def test_contract_with_standin_a_weights_only_change_rewrites_only_the_engines(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    """New weights: TrtCompile's and AotiPackage's specs and inputs are the same bytes (so
    both are cache hits), and the new package differs from the old in its engine object
    and metadata alone."""
    first_actions, _ = _build(trt_actions, seed=5)
    first = {p: Path(p).read_bytes() for p in (f"{OUT}.refittable.ep", f"{OUT}.program.pt2")}
    first_package = _records(f"{OUT}.pt2")
    second_actions, standin = _build(trt_actions, seed=7)

    for spec in (f"{OUT}.compile.json", f"{OUT}.package.json"):
        assert written(first_actions, spec) == written(second_actions, spec)
    assert first == {p: Path(p).read_bytes() for p in first}
    assert standin.names().count("save") == 1  # AotiPackage's; AotiRefit saved nothing
    second_package = _records(f"{OUT}.pt2")
    changed = {n for n in second_package if second_package[n] != first_package[n]}
    assert changed == {"data/constants/custom_obj_0", "data/aotinductor/model/model_metadata.json"}


def test_the_manifest_and_the_metadata_say_how_the_weights_got_in(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    _build(trt_actions)
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert manifest.weights.how == "refit"
    assert "no engine build" in manifest.weights.detail
    assert "compiled wrapper is AotiPackage's" in manifest.weights.detail
    weights = hashlib.sha256(Path(f"{OUT}.weights.safetensors").read_bytes()).hexdigest()
    assert manifest.weights.sha256 == weights
    (engine,) = manifest.engines
    assert (engine.name, engine.record) == ("_run_on_acc_0_engine", "data/constants/custom_obj_0")
    assert manifest.tensorrt is not None
    assert (manifest.tensorrt.flavour, manifest.tensorrt.tensorrt) == ("standard", "11.0.0.12")
    metadata = package_archive.read_metadata(Path(f"{OUT}.pt2"))
    assert metadata["AOTI_DEVICE_KEY"] == "cuda"  # torch's own keys kept
    assert {k: v for k, v in metadata.items() if k.startswith("kiln.")} == manifest.metadata
    assert metadata["kiln.target"] == f"//models:{NAME}"
    assert metadata["kiln.model"] == TINY.label
    assert metadata["kiln.weights_sha256"] == weights
    assert metadata["kiln.weights_how"] == "refit"
    assert json.loads(metadata["kiln.engines"]) == {engine.name: engine.sha256}
    assert (
        metadata["kiln.compile_key"]
        == hashlib.sha256(Path(f"{OUT}.refittable.ep").read_bytes()).hexdigest()
    )


def test_a_program_with_weights_outside_its_engines_is_packaged_again(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    """A PyTorch op kept out of TensorRT with parameters of its own: the wrapper was
    compiled with the structure's placeholders for them, so the refit module is saved
    again, and the manifest says why."""
    refit_module = StandIn._graph_module

    def with_own_weights(self: StandIn, program: Any, *, refit: bool = False) -> Any:
        module = refit_module(self, program, refit=refit)
        if refit:  # output * norm_weight, after the engine
            module.register_parameter("norm_weight", torch.nn.Parameter(torch.ones(4)))
            output = next(n for n in module.graph.nodes if n.op == "output")
            with module.graph.inserting_before(output):
                weight = module.graph.get_attr("norm_weight")
                scaled = module.graph.call_function(torch.mul, (output.args[0], weight))
            output.args = (scaled,)
            module.recompile()
        return module

    trt_actions.setattr(StandIn, "_graph_module", with_own_weights)
    _, standin = _build(trt_actions)
    assert standin.names() == ["load", "save", "load", "refit_module_weights", "save"]
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert manifest.weights.how == "refit"
    assert "packaged again with the AOTInductor save" in manifest.weights.detail
    assert "reads 1 weight(s) of its own (norm_weight)" in manifest.weights.detail


def test_where_the_toolchain_cannot_refit_after_all_the_engines_are_built_and_packaged(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    """The GPU node's Torch-TensorRT has ENABLED_FEATURES.refit False though the rule
    expected a refit: AotiRefit compiles the program with its weights and packages that,
    and the manifest says so."""
    _, standin = _build(trt_actions, refit=False)
    assert standin.names() == ["load", "save", "Input", "compile", "save"]
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert manifest.weights.how == "built"
    assert manifest.weights.detail == (
        "built with the weights, since torch_tensorrt 2.13.0 has ENABLED_FEATURES.refit "
        "False: a change of weights rebuilds the engine"
    )
    assert package_archive.read_metadata(Path(f"{OUT}.pt2"))["kiln.weights_how"] == "built"


def test_engines_under_other_constant_names_are_matched_by_their_own_names(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    """Two engines with a PyTorch op between them (torch_executed_ops), in a package whose
    constants are named otherwise than the refit module's attributes: each refit engine
    replaces the package's object of the same engine name (its serialized state's)."""
    _, standin = _build(
        trt_actions, engines=2, fallback_op=True, constant_prefix="lifted_custom_obj_"
    )
    assert standin.names() == ["load", "save", "load", "refit_module_weights"]  # no save again
    program, package = _records(f"{OUT}.program.pt2"), _records(f"{OUT}.pt2")
    config = json.loads(package["data/aotinductor/model/custom_objs_config.json"])
    assert config == {
        "lifted_custom_obj__run_on_acc_0_engine": "custom_obj_0",
        "lifted_custom_obj__run_on_acc_1_engine": "custom_obj_1",
    }
    for i in (0, 1):
        record = f"data/constants/custom_obj_{i}"
        engine = unpickled_engine(package[record])
        assert engine.__getstate__()[0][1] == f"_run_on_acc_{i}"  # the engine it replaced
        assert engine.__getstate__()[0][3] != unpickled_engine(program[record]).__getstate__()[0][3]
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert "compiled wrapper is AotiPackage's" in manifest.weights.detail


def _refit_engine(refit: Any) -> Any:
    module = StandIn()._graph_module(refit.args[1], refit=True)
    return module._run_on_acc_0_engine


def test_where_the_refitter_can_refit_the_engines_directly_torch_tensorrt_is_not_used(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    """The direct path (kiln.actions.tensorrt.engine_refit, pinned in test_engine_refit.py
    against a TensorRT stand-in): its engine records go into the package as they are, no
    refit_module_weights runs, and the manifest says how the weights got in."""
    from kiln.actions import torchtrt_runtime
    from kiln.actions.tensorrt import engine_refit

    record = "data/constants/custom_obj_0"
    direct = engine_refit.DirectRefit(
        records={"_run_on_acc_0_engine": record},
        replace={record: b"the refit engine object"},
        engines={"_run_on_acc_0_engine": b"the refit engine"},
        detail="refit with TensorRT's Refitter (stand-in)",
    )
    trt_actions.setattr(engine_refit, "refit_package", lambda *args: direct)
    rtx = type("tensorrt_rtx", (), {"__name__": "tensorrt_rtx", "__version__": "1.4.0.76"})
    trt_actions.setattr(engine_refit, "tensorrt_module", lambda: rtx)
    trt_actions.setattr(torchtrt_runtime, "load", lambda: "stand-in")
    _, standin = _build(trt_actions)

    assert standin.names() == ["load", "save"]  # AotiPackage's alone
    assert _records(f"{OUT}.pt2")[record] == b"the refit engine object"
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert manifest.weights.how == "refit"
    assert manifest.weights.detail.startswith("refit with TensorRT's Refitter (stand-in)")
    (engine,) = manifest.engines
    assert engine.sha256 == hashlib.sha256(b"the refit engine").hexdigest()
    assert manifest.tensorrt is not None
    assert (manifest.tensorrt.flavour, manifest.tensorrt.tensorrt) == ("rtx", "1.4.0.76")


def test_where_the_refitter_cannot_the_manifest_says_why(
    trt_actions: pytest.MonkeyPatch,
) -> None:
    _build(trt_actions)  # the stand-in's records are no TorchBind archive
    manifest = PackageManifest.read(f"{OUT}.manifest.json")
    assert "TensorRT's Refitter not used directly, since" in manifest.weights.detail
