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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from kiln.action_graph import Action
from kiln.action_specs import ExportSpec, PackageSpec, TrtCompileSpec
from kiln.actions import aoti_package, torch_export, trt_compile
from kiln.host_facts import GPU_HOST, GPUS, HostFacts, Toolchain, ToolchainResolver
from kiln.rule_api import RuleContext
from kiln.rules.aoti_package import RULE, AotiPackageAttrs, implementation
from kiln.rules.trt_toolchain import TENSORRT, Probe
from trt_fixtures import GPU_STANDARD, by_mnemonic, model_target, written
from trt_manifests import record
from trt_standin import StandIn
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


def test_the_engines_are_compiled_from_the_structure_and_the_weights_refit_in() -> None:
    actions = _analyze()
    assert _mnemonics(actions) == ["TorchExport", "TrtCompile", "AotiPackage", "AotiValidate"]
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
        f"{OUT}.refittable.ep",
        f"{OUT}.structure.pt2",
        f"{OUT}.weights.safetensors",
        f"{OUT}.needs.json",
    }
    assert written(actions, f"{OUT}.package.json")["refit"] == {
        "compiled": f"{OUT}.refittable.ep",
        "structure": f"{OUT}.structure.pt2",
        "weights": f"{OUT}.weights.safetensors",
    }
    assert all(by_mnemonic(actions, m).resources.gpu == 1 for m in ("TrtCompile", "AotiPackage"))


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
    assert written(actions, f"{OUT}.package.json")["refit"] is None


@pytest.fixture
def execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_refit_tiny") as root:
        yield root


def _on_cpu(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "device": "cpu"}  # the rule says cuda; there is none here


def test_contract_with_standin_the_package_refits_the_compiled_program_then_packages_it(
    execroot: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """TrtCompile: compile of the structure, refittable, saved. AotiPackage: load it,
    refit_module_weights with the program holding the real weights, then the documented
    AOTInductor save of the refit module."""
    del execroot
    # What AotiPackage sets for the process it owns; here, for this test only.
    monkeypatch.setattr(aoti_package, "pin_temp_dirs", lambda: None)
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(variable, "unset")
    actions = _analyze()
    torch_export.main(record(_on_cpu(written(actions, f"{OUT}.export.json")), ExportSpec))
    standin = StandIn(save_error=None)
    standin.install(monkeypatch)
    trt_compile.main(record(_on_cpu(written(actions, f"{OUT}.compile.json")), TrtCompileSpec))
    aoti_package.main(record(_on_cpu(written(actions, f"{OUT}.package.json")), PackageSpec))

    assert standin.names() == ["Input", "compile", "save", "load", "refit_module_weights", "save"]
    structure = standin.call("compile").args[0].state_dict
    refit = standin.call("refit_module_weights")
    for name, value in eager_state().items():
        assert not torch.equal(structure[name], value), name  # the compile saw no weights
        assert torch.equal(refit.args[1].state_dict[name], value), name
    assert refit.kwargs["verify_output"] is True
    package = standin.calls[-1]
    assert package.args[1] == str(Path(f"{OUT}.pt2").resolve())
    assert hasattr(package.args[0], "_run_on_acc_0_engine")  # the module refit returned
    assert package.kwargs["output_format"] == "aot_inductor"
    assert package.kwargs["retrace"] is True
    assert "refit with torch_tensorrt.dynamo.refit_module_weights" in capfd.readouterr().out
