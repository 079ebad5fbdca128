"""Shared pieces of the trt_engine tests: models, probes of imagined machines, analysis.

No TensorRT, torch_tensorrt or GPU exists on the machines these tests run on:
the probes here stand for the machines the rule is meant for.
"""

from __future__ import annotations

import json
from typing import Any

from kiln.action_graph import Action
from kiln.rule_api import AnalyzedTarget, DefaultInfo
from kiln.rules.model.torch_model import TorchModelInfo
from kiln.rules.tensorrt import trt_toolchain as trt_probe
from kiln.rules.tensorrt.trt_engine import RULE as TRT_ENGINE
from kiln.rules.tensorrt.trt_engine import TrtEngineAttrs
from kiln.rules.tensorrt.trt_toolchain import Gpu, Probe
from kiln.rules.tensorrt.trt_windows_engine import RULE as TRT_WINDOWS_ENGINE
from kiln.rules.tensorrt.trt_windows_engine import TrtWindowsEngineAttrs

from tests.model_fixtures import DETECTOR, MLP, rule_context

TWO_INPUTS = DETECTOR

# A Linux x86-64 machine with an H200 and the standard TensorRT (Windows builder resource).
GPU_STANDARD = Probe(
    python="3.12.3",
    executable="/usr/bin/python3",
    os="linux",
    arch="x86_64",
    torch="2.13.0+cu130",
    cuda="13.0",
    gpus=(Gpu("NVIDIA H200", "9.0", 143771),),
    torch_tensorrt="2.13.0",
    torch_tensorrt_dist="torch_tensorrt",
    flavour="standard",
    tensorrt="11.0.0.12",
    tensorrt_dist="tensorrt_cu13_libs",
    windows_cross_compile=True,
    refit=True,
)
# The GPU machine of this workplace: torch 2.11 with the TensorRT-RTX flavour.
GPU_RTX = Probe(
    python="3.12.3",
    executable="/usr/bin/python3",
    os="linux",
    arch="x86_64",
    torch="2.11.0+cu130",
    cuda="13.0",
    gpus=(Gpu("NVIDIA H200", "9.0", 143771),),
    torch_tensorrt="2.11.0",
    torch_tensorrt_dist="torch_tensorrt_rtx",
    flavour="rtx",
    tensorrt="1.4.0.76",
    tensorrt_dist="tensorrt_rtx_cu13_libs",
    windows_cross_compile=False,
    refit=True,  # torch_tensorrt 2.11 sets ENABLED_FEATURES.refit for both flavours (read)
)
# This machine, CI's and the developers': CPU-only torch, no torch_tensorrt.
CPU_ONLY = Probe(
    python="3.11.7",
    executable="/work/main/.venv/bin/python",
    os="linux",
    arch="x86_64",
    torch="2.13.0+cpu",
    cuda=None,
    gpus=(),
    torch_tensorrt_error="ModuleNotFoundError: No module named 'torch_tensorrt'",
)


def model_target(model: TorchModelInfo) -> AnalyzedTarget:
    return AnalyzedTarget(
        model.label, {TorchModelInfo: model, DefaultInfo: DefaultInfo(tuple(model.files))}
    )


def analyze(
    monkeypatch: Any,
    attrs: dict[str, Any],
    *,
    windows_rule: bool = False,
    probe: Probe = GPU_STANDARD,
    model: TorchModelInfo = MLP,
    package: str = "models",
) -> tuple[list[object], list[Action]]:
    """Run the rule's implementation on `attrs` with `probe` as the machine's toolchain."""
    from kiln.rules.tensorrt.trt_engine import implementation

    monkeypatch.setattr(trt_probe, "probe", lambda python, env=None: probe)
    schema = TrtWindowsEngineAttrs if windows_rule else TrtEngineAttrs
    validated = schema.model_validate({"model": model.label, **attrs})
    label = f"//{package}:{attrs['name']}"
    rule = TRT_WINDOWS_ENGINE if windows_rule else TRT_ENGINE
    ctx = rule_context(rule, label, validated, {model.label: model_target(model)})
    providers = implementation(ctx)
    return providers, ctx.actions.declared


def by_mnemonic(actions: list[Action], mnemonic: str) -> Action:
    (found,) = [a for a in actions if a.mnemonic == mnemonic]
    return found


def written(actions: list[Action], path: str) -> dict[str, Any]:
    """The fields of the spec a FileWrite action of `actions` writes to `path` (its JSON
    without the record's kind and format)."""
    (found,) = [a for a in actions if a.content is not None and a.outputs[0].path == path]
    assert found.content is not None
    data: dict[str, Any] = json.loads(found.content)
    assert data.pop("format") == 1 and data.pop("kind")
    return data


def probe_file(tmp_path: Any, probe: Probe) -> str:
    """A KILN_TRT_PROBE_JSON file describing `probe`."""
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe.to_json()))
    return str(path)
